package grpclimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/go-chi/chi/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/grpclimit"
	"github.com/ratekey/ratekey/limiter"
	"github.com/ratekey/ratekey/limitkey"
)

// A gRPC server limited by the front door that limits the HTTP routes:
// each client network may call Health/Check twice an hour.
func Example() {
	m, err := ratekey.New(ratekey.Config{
		Router: chi.NewRouter(), // the HTTP side's router (here, no routes)
		Policies: []ratekey.Policy{{
			Name: "health", Key: []limitkey.Dimension{limitkey.DimNetwork},
			Limit:      limiter.Limit{Rate: limiter.Rate{Count: 2, Per: time.Hour}, Burst: 2},
			Operations: []string{"/grpc.health.v1.Health/Check"},
		}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	lim := grpclimit.New(m, nil)
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lim.Register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	for range 3 {
		var md metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		fmt.Println(status.Code(err), md.Get("ratelimit"))
		for _, d := range status.Convert(err).Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("  retry in", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				fmt.Println("  quota", d.GetViolations()[0].GetSubject())
			}
		}
	}
	// Output:
	// OK ["health";r=1;t=1800]
	// OK ["health";r=0;t=3600]
	// ResourceExhausted ["health";r=0;t=3600]
	//   retry in 30m0s
	//   quota policy:health
}
