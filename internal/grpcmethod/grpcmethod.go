// Package grpcmethod tells a gRPC full method name ("/pkg.Service/Method",
// the :path of a gRPC call; gRPC over HTTP/2, "Path → ":path" "/"
// Service-Name "/" {method name}") from anything else. The root package
// accepts such names as operations, package grpclimit names calls by them,
// and the debug endpoint describes calls of them.
package grpcmethod

// MaxLen bounds a full method name, in bytes: grpc-go's own service and
// method names are Go identifiers and protobuf names, far shorter.
const MaxLen = 512

// Valid reports whether s is a gRPC full method name: "/", a non-empty
// service name, "/", a non-empty method name, at most MaxLen bytes, every
// other byte printable ASCII other than space, "{" and "}" (so that it
// can never be read as an HTTP route template or contain a key
// separator's look-alike whitespace).
func Valid(s string) bool {
	if len(s) < 4 || len(s) > MaxLen || s[0] != '/' {
		return false
	}
	slash := 0 // the index of the second "/"
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '/':
			if slash != 0 {
				return false
			}
			slash = i
		case c <= ' ' || c >= 0x7f || c == '{' || c == '}':
			return false
		}
	}
	return slash > 1 && slash < len(s)-1
}
