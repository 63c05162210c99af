package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("demo "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fmt.Fprintf(stderr, "\nflags of demo %s:\n", name)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and refuses stray positional arguments (a config
// file named without -config must not be silently ignored).
func parseFlags(fs *flag.FlagSet, args []string) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q (a config file is given with -config)\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return false
	}
	return true
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newJSONLogger is the demo's log: JSON lines, Info and above.
func newJSONLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	path := fs.String("config", "", "config file (default: the embedded default)")
	addr := fs.String("addr", "", "listen address, overrides the config's listen (port 0 picks a free port)")
	redisURL := fs.String("redis", "", "Redis URL (redis://host:port/db): use the shared Redis store instead of the config's limiter.store")
	clusterURL := fs.String("redis-cluster", "", "Redis Cluster URL (redis://host:port?addr=host2:port2&addr=host3:port3): use a Redis Cluster store instead of the config's limiter.store")
	grpcAddr := fs.String("grpc-addr", "", "gRPC listen address, overrides the config's grpc.listen (off when both are empty; port 0 picks a free port)")
	if !parseFlags(fs, args) {
		return 2
	}
	if msg := checkRedisFlags(*redisURL, *clusterURL); msg != "" {
		fmt.Fprintln(stderr, "demo serve: "+msg)
		return 2
	}
	for _, f := range []struct{ name, value string }{{"-addr", *addr}, {"-grpc-addr", *grpcAddr}} {
		if errs := checkListen(f.name, f.value); f.value != "" && len(errs) > 0 {
			fmt.Fprintln(stderr, "demo serve: "+errs[0].Error())
			return 2
		}
	}
	logger := newJSONLogger(stderr)
	cfg, err := loadConfig(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg.useRedis(*redisURL, *clusterURL)
	a, err := build(cfg, logger, nil)
	if err != nil {
		printConfigErrors(stderr, *path, err)
		return 1
	}
	grpcListen := cmp.Or(*grpcAddr, cfg.GRPC.Listen)
	h, err := newServerGRPC(*path, logger, a, grpcListen != "")
	if err != nil {
		a.auth.close()
		a.store.close()
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer h.close() // stop refresh loops, close the Redis client
	h.redisURL, h.cluster = *redisURL, *clusterURL
	listen := cfg.Listen
	if *addr != "" {
		listen = *addr
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "demo serve: cannot listen on %s: %v\n", listen, err)
		return 1
	}
	srv := newHTTPServer(h, logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer reloadOnHUP(ctx, h)()
	go func() {
		<-ctx.Done()
		fmt.Fprintln(stdout, "ratekey demo shutting down")
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	warnIfUnreachable(a.store, logger)
	fmt.Fprintf(stdout, "ratekey demo listening on http://%s\n", ln.Addr())
	if grpcListen != "" {
		stopGRPC, err := serveGRPC(h.gsrv, grpcListen, stdout)
		if err != nil {
			_ = ln.Close()
			fmt.Fprintf(stderr, "demo serve: cannot serve gRPC on %s: %v\n", grpcListen, err)
			return 1
		}
		defer stopGRPC()
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// serveGRPC serves gs on listen, announcing its address on stdout, until
// the function it returns stops it (gracefully, for at most 5 s).
func serveGRPC(gs *grpc.Server, listen string, stdout io.Writer) (stop func(), err error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "ratekey demo serving gRPC on %s\n", ln.Addr())
	go func() { _ = gs.Serve(ln) }()
	return func() {
		done := make(chan struct{})
		go func() { gs.GracefulStop(); close(done) }()
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			gs.Stop()
		}
	}, nil
}

// checkRedisFlags returns why -redis or -redis-cluster is refused, or "".
// A URL's parse error may quote it, password included: never shown.
func checkRedisFlags(redisURL, clusterURL string) string {
	if redisURL != "" {
		if _, err := goredis.ParseURL(redisURL); err != nil {
			return "-redis: " + badRedisURL
		}
	}
	if clusterURL != "" {
		if redisURL != "" {
			return "-redis and -redis-cluster are exclusive"
		}
		if _, err := goredis.ParseClusterURL(clusterURL); err != nil {
			return "-redis-cluster: " + badClusterURL
		}
	}
	return ""
}

// newHTTPServer is the demo's http.Server for h: bounded reads, writes,
// idle connections and headers; its own errors logged as warnings.
func newHTTPServer(h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// reloadOnHUP reloads h's config on every SIGHUP, as nginx does, until ctx
// is done; the function it returns stops listening for the signal.
func reloadOnHUP(ctx context.Context, h *server) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-hup:
				_ = h.reload() // logged; the running config stays on error
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() { signal.Stop(hup) }
}
