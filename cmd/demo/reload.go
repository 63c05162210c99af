package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/ratekey/ratekey"
	"github.com/ratekey/ratekey/policy"
)

// server is the demo's root handler: the app built from the current config,
// swapped atomically by reload. A request runs entirely on the handler it
// started with.
type server struct {
	path     string // config file; "" is the embedded default
	redisURL string // the -redis flag, applied to every reloaded config
	cluster  string // the -redis-cluster flag, likewise
	logger   *slog.Logger
	mu       sync.Mutex // serialises reloads; guards app and stop
	app      *app
	stop     context.CancelFunc // ends the active app's trust-set refresh loop
	handler  atomic.Pointer[http.Handler]
	// current is app, for the gRPC interceptors (grpc.go); gsrv the gRPC
	// server, nil when the demo serves no gRPC.
	current atomic.Pointer[app]
	gsrv    *grpc.Server
}

// activate starts a's trust-set refresh loop (when a's rules have file or
// URL sources) and stops the previous app's. Callers hold s.mu (or own s).
func (s *server) activate(a *app) {
	if s.stop != nil {
		s.stop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	if a.refresh <= 0 {
		return
	}
	t := time.NewTicker(a.refresh)
	go func() {
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := a.resolver.Refresh(ctx); err != nil {
					s.logger.Warn("ratekey: trusted proxy ranges not refreshed; the last good ones stay", slog.String("error", err.Error()))
				}
			}
		}
	}()
}

// close stops the refresh loop and releases the active app's resources.
func (s *server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
	}
	s.app.auth.close()
	s.app.store.close()
	if s.app.front != nil {
		s.app.front.FlushLog()
	}
	if err := shutdownOTLP(s.app.otel); err != nil { // pushes what is left
		s.logger.Warn("ratekey: the last OTLP metrics export failed", slog.String("error", err.Error()))
	}
}

// newServer wraps a built app, serving no gRPC.
func newServer(path string, logger *slog.Logger, a *app) (*server, error) {
	return newServerGRPC(path, logger, a, false)
}

// newServerGRPC wraps a built app; with withGRPC, it has a gRPC server
// too (s.gsrv, grpc.go), whose calls a's chain limits.
func newServerGRPC(path string, logger *slog.Logger, a *app, withGRPC bool) (*server, error) {
	s := &server{path: path, logger: logger, app: a}
	if withGRPC {
		s.gsrv = newGRPCServer(s)
		a.grpcSrv = s.gsrv
	}
	h, err := a.router(logger)
	if err != nil {
		return nil, err
	}
	s.handler.Store(&h)
	s.current.Store(a)
	s.activate(a)
	return s, nil
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.handler.Load()).ServeHTTP(w, r)
}

// reload re-reads the config file and, if it is valid, swaps it in: the
// limiter store is kept, so policies whose name, rate and burst are
// unchanged keep their budgets (as nginx keeps its zones across a reload)
// and changed ones start fresh; each change is logged. An invalid config is
// refused, logged with every error, and the running one stays. The listen
// address is not re-bound (a restart applies it).
func (s *server) reload() (err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A reload that fails for any reason keeps the running configuration
	// and the process: a panic while reading a new file is a bug to report,
	// not a reason to stop serving.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("config: internal error while reloading: %v", p)
			s.logger.Error("ratekey reload refused: the running configuration stays", slog.Any("errors", []string{err.Error()}))
		}
	}()
	cfg, err := loadConfig(s.path)
	var a *app
	if err == nil {
		cfg.useRedis(s.redisURL, s.cluster)
		a, err = build(cfg, s.logger, s.app)
	}
	var h http.Handler
	if err == nil {
		a.grpcSrv = s.gsrv
		h, err = a.router(s.logger)
	}
	if err != nil {
		if a != nil {
			a.auth.close()
		}
		var list []string
		for _, e := range splitErrors(err) {
			list = append(list, e.Error())
		}
		s.logger.Error("ratekey reload refused: the running configuration stays", slog.Any("errors", list))
		return err
	}
	if cfg.Listen != s.app.cfg.Listen {
		s.logger.Warn("ratekey reload: listen changed; the server keeps its socket until a restart",
			slog.String("listen", cfg.Listen), slog.String("previous", s.app.cfg.Listen))
	}
	if cfg.GRPC.Listen != s.app.cfg.GRPC.Listen {
		s.logger.Warn("ratekey reload: grpc.listen changed; the gRPC server keeps its socket until a restart",
			slog.String("listen", cfg.GRPC.Listen), slog.String("previous", s.app.cfg.GRPC.Listen))
	}
	if was, now := max(s.app.cfg.Limiter.Replicas, 1), max(cfg.Limiter.Replicas, 1); was != now {
		s.logger.Info("ratekey reload: limiter.replicas changed; each process enforces its new share of every limit, and every bucket keeps its debt",
			slog.Int64("replicas", int64(now)), slog.Int64("previous", int64(was)))
	}
	changes := policy.Diff(effective(s.app), effective(a))
	for _, c := range changes {
		s.logger.Info("ratekey reload", slog.String("policy", c.Policy), slog.String("change", c.Change), slog.String("detail", c.Detail))
	}
	old := s.app
	s.app = a
	s.handler.Store(&h)
	s.current.Store(a)
	s.activate(a)
	old.auth.close() // requests in flight keep verifying against cached keys
	if old.front != nil {
		old.front.FlushLog() // its pending summaries; requests in flight may add more, flushed by its timer
	}
	s.logger.Info("ratekey config reloaded", slog.String("config", s.describe()), slog.Int("policies", len(a.policies)), slog.Int("changes", len(changes)),
		slog.Int("issuers", len(cfg.Auth.Issuers)), slog.Int("api_keys", a.auth.apiKeys))
	return nil
}

// effective returns a's policies as they run: with the top-level dry_run
// applied, so that turning it on or off is reported per policy.
func effective(a *app) []ratekey.Policy {
	ps := slices.Clone(a.policies)
	for i := range ps {
		ps[i].DryRun = ps[i].DryRun || a.cfg.DryRun
	}
	return ps
}

func (s *server) describe() string {
	if s.path == "" {
		return "embedded default"
	}
	return fmt.Sprint(s.path)
}
