// Package grpcmethod tells a gRPC full method name ("/pkg.Service/Method",
// the :path of a gRPC call; gRPC over HTTP/2, "Path → ":path" "/"
// Service-Name "/" {method name}") from anything else, an HTTP route in
// particular. The root package
// accepts such names as operations, package grpclimit names calls by them,
// and the debug endpoint describes calls of them.
package grpcmethod

// MaxLen bounds a full method name, in bytes: grpc-go's own service and
// method names are Go identifiers and protobuf names, far shorter.
const MaxLen = 512

// Valid reports whether s is a gRPC full method name as protoc names
// them: "/", the service's full name (a protobuf package and the service:
// identifiers joined by dots, at least two), "/", the method's name (an
// identifier), at most MaxLen bytes; an identifier is a letter or "_" and
// then letters, digits and "_" (the protobuf language specification's
// ident). The package is required so that an HTTP route written without
// its method ("/v1/work") is never taken for a gRPC method: a service
// declared without a package cannot be named.
func Valid(s string) bool {
	if len(s) > MaxLen || len(s) < 6 || s[0] != '/' {
		return false
	}
	service, method, ok := cutByte(s[1:], '/')
	if !ok || !ident(method) {
		return false
	}
	dots := 0
	for {
		part, rest, more := cutByte(service, '.')
		if !ident(part) {
			return false
		}
		if !more {
			return dots > 0
		}
		dots++
		service = rest
	}
}

// cutByte is strings.Cut for one byte.
func cutByte(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// ident reports whether s is a protobuf identifier: a letter or "_", then
// letters, digits and "_".
func ident(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
