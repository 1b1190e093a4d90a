package extender

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Server is a running extender: node and pod informers feeding the cluster
// view, and the HTTP server of NewHandler.
type Server struct {
	logger  klog.Logger
	opts    *Options
	ext     *Extender
	cluster *Cluster
	factory informers.SharedInformerFactory
	http    *http.Server
	ln      net.Listener

	stopInformers context.CancelFunc
	stopCampaign  context.CancelFunc
	campaignDone  <-chan struct{} // closed once the leader election has ended; nil without it
	done          chan struct{}   // closed when serving has ended
	serveErr      error           // why serving ended, written before done is closed
	stopOnce      sync.Once
	stopErr       error
}

// Start validates opts, starts the informers and serves on opts.BindAddress
// in the background, binding pods through client. It returns once the
// listener is open; the extender is ready (/readyz) once WaitForSync returns.
// Stop it with Stop; ctx carries the logger and, when it ends, stops the
// informers (call Stop all the same: it also ends the leader election).
func Start(ctx context.Context, opts *Options, client kubernetes.Interface) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	args, err := opts.PlacementArgs()
	if err != nil {
		return nil, err
	}
	policy, err := args.NewPolicy()
	if err != nil {
		return nil, err
	}
	tlsConfig, err := serverTLS(opts)
	if err != nil {
		return nil, err
	}
	var auth *ClientAuth
	if opts.ClientCAFile != "" {
		auth = &ClientAuth{Names: opts.ClientNames}
	}

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(dropManagedFields))
	cluster, err := NewCluster(factory)
	if err != nil {
		return nil, err
	}
	if args.DRA.Enabled {
		served, err := servesDRA(client.Discovery())
		if err != nil {
			return nil, err
		}
		if served {
			if err := cluster.WatchDRA(factory, args.DRA.Driver); err != nil {
				return nil, err
			}
		} else {
			klog.FromContext(ctx).Info("The API server does not serve resource.k8s.io/v1: no node's GPUs are DRA devices", "driver", args.DRA.Driver)
		}
	}
	ln, err := net.Listen("tcp", opts.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("listening on --bind-address %s: %w", opts.BindAddress, err)
	}

	logger := klog.FromContext(ctx).WithName("extender")
	ctx = klog.NewContext(ctx, logger)
	ext := New(cluster, client, policy)
	ext.BindOnlyFor(opts.SchedulerNames...)
	ext.PlaceGangPods(opts.PodGroups == PodGroupsPlace)
	ext.settleAfter = opts.BindSettleAfter
	if err := ext.UseExternal(args); err != nil {
		ln.Close()
		return nil, err
	}
	handler := NewHandler(ext, opts.MaxRequestBytes, auth)
	// The campaign outlives ctx: Stop ends it once the binds in flight are
	// done, so that the lease is released after them, not as ctx ends.
	campaignCtx, stopCampaign := context.WithCancel(context.WithoutCancel(ctx))
	var campaignDone <-chan struct{}
	if opts.LeaderElect {
		if campaignDone, err = campaign(campaignCtx, opts, client, ext); err != nil {
			stopCampaign()
			ln.Close()
			return nil, err
		}
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	s := &Server{
		logger:  logger,
		opts:    opts,
		ext:     ext,
		cluster: cluster,
		factory: factory,
		ln:      ln,
		http: &http.Server{
			Handler:           handler,
			TLSConfig:         tlsConfig,
			ReadHeaderTimeout: opts.ReadHeaderTimeout,
			ReadTimeout:       opts.ReadTimeout,
			WriteTimeout:      opts.WriteTimeout,
			IdleTimeout:       2 * opts.ReadTimeout,
			MaxHeaderBytes:    64 << 10,
			BaseContext:       func(net.Listener) context.Context { return ctx },
			ErrorLog:          klog.NewStandardLogger("WARNING"),
		},
		stopInformers: stopInformers,
		stopCampaign:  stopCampaign,
		campaignDone:  campaignDone,
		done:          make(chan struct{}),
	}
	factory.Start(informerCtx.Done())
	go func() {
		defer close(s.done)
		var err error
		if tlsConfig != nil {
			err = s.http.ServeTLS(ln, "", "")
		} else {
			err = s.http.Serve(ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = fmt.Errorf("serving on %s: %w", ln.Addr(), err)
		}
	}()
	logger.Info("Serving the extender API", "address", ln.Addr().String(), "tls", tlsConfig != nil, "clientCertificates", auth != nil, "leaderElect", opts.LeaderElect,
		"policy", policy.Type(), "placementArgs", opts.PlacementArgsFile)
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// WaitForSync blocks until the informers' initial lists are in the cluster
// view (the extender is ready), or ctx ends.
func (s *Server) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.cluster.HasSynced) {
		return fmt.Errorf("waiting for the node and pod informers to sync: %w", context.Cause(ctx))
	}
	return nil
}

// Done is closed when the server has stopped serving, after Stop or on a
// serving error (Stop returns it).
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop shuts the server down: it stops accepting connections, lets requests
// in flight finish for up to ShutdownTimeout, then releases the leader lease
// (so that another instance binds at once), stops the informers and waits
// for them. It returns the serving error, if serving failed, or the
// shutdown's. It is idempotent.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
		defer cancel()
		shutdownErr := s.http.Shutdown(ctx)
		<-s.done
		s.logger.V(2).Info("Stopped serving")
		s.stopCampaign()
		if s.campaignDone != nil {
			<-s.campaignDone
		}
		s.stopInformers()
		s.factory.Shutdown()
		s.stopErr = errors.Join(s.serveErr, shutdownErr, s.ext.Close())
		s.logger.Info("Stopped", "err", s.stopErr)
	})
	return s.stopErr
}

// Run serves until ctx ends or serving fails, then stops.
func Run(ctx context.Context, opts *Options, client kubernetes.Interface) error {
	s, err := Start(ctx, opts, client)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		klog.FromContext(ctx).Info("Shutting down")
	case <-s.Done():
	}
	return s.Stop()
}

// dropManagedFields trims what the extender never reads from cached objects.
func dropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
