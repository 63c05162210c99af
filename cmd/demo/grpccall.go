package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// cmdGRPCCall makes one unary call to the demo's gRPC server, a grpcurl
// of its own: it prints the status (and, for a refusal, its details:
// ErrorInfo, RetryInfo, QuotaFailure), the ratelimit response metadata
// and the response. Exit status 0 when the call succeeded, 1 otherwise.
func cmdGRPCCall(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("grpc-call", stderr)
	addr := fs.String("addr", "127.0.0.1:9090", "the demo's gRPC address (serve -grpc-addr)")
	method := fs.String("method", workDo, "full method name: "+workDo+" or /grpc.health.v1.Health/Check")
	token := fs.String("token", "", "a bearer token (demo token) or API key (demo apikey), sent as authorization metadata")
	xff := fs.String("x-forwarded-for", "", "an x-forwarded-for metadata value (read only from a trusted proxy)")
	timeout := fs.Duration("timeout", 10*time.Second, "the call's deadline")
	if !parseFlags(fs, args) {
		return 2
	}
	cc, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(stderr, "demo grpc-call: -addr:", err)
		return 2
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if *token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+*token)
	}
	if *xff != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", *xff)
	}
	in, out := callMessages(*method)
	var header metadata.MD
	err = cc.Invoke(ctx, *method, in, out, grpc.Header(&header))
	printCall(stdout, err, header, out)
	if err != nil {
		return 1
	}
	return 0
}

// callMessages returns the request and response messages of method: the
// health service's, or Work's (StringValue in, Struct out).
func callMessages(method string) (in, out proto.Message) {
	if strings.HasPrefix(method, "/"+healthService+"/") {
		return &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}
	}
	return wrapperspb.String(""), &structpb.Struct{}
}

// printCall prints a call's status, its details, its ratelimit metadata
// and, when it succeeded, its response as JSON.
func printCall(w io.Writer, err error, header metadata.MD, out proto.Message) {
	st := status.Convert(err)
	if err == nil {
		fmt.Fprintln(w, "status: OK")
	} else {
		fmt.Fprintf(w, "status: %s: %s\n", codeName(err), st.Message())
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			fmt.Fprintf(w, "error-info: %s type=%s policy=%s\n", d.GetReason(), d.GetMetadata()["type"], d.GetMetadata()["policy"])
		case *errdetails.RetryInfo:
			fmt.Fprintf(w, "retry-info: retry in %v\n", d.GetRetryDelay().AsDuration())
		case *errdetails.QuotaFailure:
			for _, v := range d.GetViolations() {
				fmt.Fprintf(w, "quota-failure: %s\n", v.GetSubject())
			}
		}
	}
	for _, k := range []string{"ratelimit-policy", "ratelimit", "ratelimit-decision"} {
		if v := header.Get(k); len(v) > 0 {
			fmt.Fprintf(w, "%s: %s\n", k, strings.Join(v, ", "))
		}
	}
	if err == nil {
		// protojson varies its spaces on purpose: compacted, the line is
		// the same from one run to the next.
		b, _ := protojson.Marshal(out)
		var c bytes.Buffer
		if json.Compact(&c, b) == nil {
			b = c.Bytes()
		}
		fmt.Fprintf(w, "response: %s\n", b)
	}
}
