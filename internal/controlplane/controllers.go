package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/quota/v1/generic"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/deployment"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
	"k8s.io/kubernetes/pkg/controller/job"
	namespacecontroller "k8s.io/kubernetes/pkg/controller/namespace"
	"k8s.io/kubernetes/pkg/controller/replicaset"
	"k8s.io/kubernetes/pkg/controller/resourcequota"
	serviceaccountcontroller "k8s.io/kubernetes/pkg/controller/serviceaccount"
	"k8s.io/kubernetes/pkg/controller/statefulset"
	quotainstall "k8s.io/kubernetes/pkg/quota/v1/install"
	"k8s.io/kubernetes/pkg/serviceaccount"
)

// ControllerAPIServerFlags are the kube-apiserver flags of a control plane
// that runs its controllers (Options.Controllers): as DefaultAPIServerFlags
// but with ServiceAccount admission on, as in a real cluster, since the
// ServiceAccount controller creates every namespace's "default"
// ServiceAccount. TaintNodesByCondition stays off: no node lifecycle
// controller runs to remove its not-ready taint.
var ControllerAPIServerFlags = []string{
	"--disable-admission-plugins=TaintNodesByCondition",
	"--endpoint-reconciler-type=none",
}

// Controllers names the controllers Options.Controllers starts, the
// kube-controller-manager controllers that workloads need: their upstream
// packages (k8s.io/kubernetes/pkg/controller/...), each with kube-controller-manager's
// default number of workers, sharing one informer factory.
var Controllers = []string{
	"deployment", "replicaset", "job", "statefulset",
	"garbage-collector", "namespace", "serviceaccount", "serviceaccount-token",
	"resourcequota",
}

// controllerWorkers is the number of workers each controller runs; the
// playground's workloads are small, so fewer than kube-controller-manager's
// defaults (5 to 20).
const controllerWorkers = 2

// gcSyncPeriod is how often the garbage collector and the resource quota
// controller rediscover the API's resources (CRDs installed later
// included), as kube-controller-manager.
const gcSyncPeriod = 30 * time.Second

// quotaResync is how often the resource quota controller recounts every
// quota. It also recounts a quota when its pods leave or finish, but not
// when one is added: a recount that ran while its pod cache lagged behind a
// burst of admissions writes a usage below the truth, and only the next
// periodic recount corrects it. kube-controller-manager's default of 5
// minutes leaves quota that low for minutes; the playground's few quotas
// are cheap to recount, so it corrects them within seconds.
const quotaResync = 10 * time.Second

// startControllers runs Controllers against the API server at config until
// ctx ends, and returns once their informers have synced and the "default"
// ServiceAccount of the "default" namespace exists, so that pods can be
// created with ServiceAccount admission on. wg is done when every
// controller goroutine has returned.
//
// The token controller signs the legacy token Secrets it fills with a key
// generated here; the in-process API server verifies only its own
// test key, so such tokens do not authenticate. Pods get bound tokens from
// the API server itself, as in a real cluster, so nothing here relies on
// legacy tokens.
func startControllers(ctx context.Context, config *rest.Config, wg *sync.WaitGroup) error {
	clientFor := func(name string) (*kubernetes.Clientset, *rest.Config, error) {
		c := rest.AddUserAgent(rest.CopyConfig(config), name)
		c.QPS, c.Burst = 200, 400
		client, err := kubernetes.NewForConfig(c)
		if err != nil {
			return nil, nil, fmt.Errorf("client for %s: %w", name, err)
		}
		return client, c, nil
	}
	shared, _, err := clientFor("shared-informers")
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(shared, 0)
	metaConfig := rest.AddUserAgent(rest.CopyConfig(config), "metadata-informers")
	metaClient, err := metadata.NewForConfig(metaConfig)
	if err != nil {
		return fmt.Errorf("metadata client: %w", err)
	}
	metaFactory := metadatainformer.NewSharedInformerFactory(metaClient, 0)
	informersStarted := make(chan struct{})

	var runs []func(context.Context)
	add := func(run func(context.Context)) { runs = append(runs, run) }

	client, _, err := clientFor("deployment-controller")
	if err != nil {
		return err
	}
	dc, err := deployment.NewDeploymentController(ctx, factory.Apps().V1().Deployments(), factory.Apps().V1().ReplicaSets(), factory.Core().V1().Pods(), client)
	if err != nil {
		return fmt.Errorf("deployment controller: %w", err)
	}
	add(func(ctx context.Context) { dc.Run(ctx, controllerWorkers) })

	if client, _, err = clientFor("replicaset-controller"); err != nil {
		return err
	}
	rsc := replicaset.NewReplicaSetController(ctx, factory.Apps().V1().ReplicaSets(), factory.Core().V1().Pods(), client, replicaset.BurstReplicas)
	add(func(ctx context.Context) { rsc.Run(ctx, controllerWorkers) })

	if client, _, err = clientFor("job-controller"); err != nil {
		return err
	}
	jc, err := job.NewController(ctx, client, factory.Core().V1().Pods(), factory.Batch().V1().Jobs(), nil, nil)
	if err != nil {
		return fmt.Errorf("job controller: %w", err)
	}
	add(func(ctx context.Context) { jc.Run(ctx, controllerWorkers) })

	if client, _, err = clientFor("statefulset-controller"); err != nil {
		return err
	}
	ssc := statefulset.NewStatefulSetController(ctx, factory.Core().V1().Pods(), factory.Apps().V1().StatefulSets(),
		factory.Core().V1().PersistentVolumeClaims(), factory.Apps().V1().ControllerRevisions(), client)
	add(func(ctx context.Context) { ssc.Run(ctx, controllerWorkers) })

	gcClient, gcConfig, err := clientFor("generic-garbage-collector")
	if err != nil {
		return err
	}
	gcMeta, err := metadata.NewForConfig(gcConfig)
	if err != nil {
		return fmt.Errorf("garbage collector: %w", err)
	}
	discoveryClient := memory.NewMemCacheClient(gcClient.Discovery())
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(discoveryClient)
	gc, err := garbagecollector.NewGarbageCollector(ctx, gcClient, gcMeta, mapper, garbagecollector.DefaultIgnoredResources(),
		informerfactory.NewInformerFactory(factory, metaFactory), informersStarted)
	if err != nil {
		return fmt.Errorf("garbage collector: %w", err)
	}
	add(func(ctx context.Context) { gc.Run(ctx, controllerWorkers, gcSyncPeriod) })
	add(func(ctx context.Context) { gc.Sync(ctx, gcClient.Discovery(), gcSyncPeriod) })

	nsClient, nsConfig, err := clientFor("namespace-controller")
	if err != nil {
		return err
	}
	nsMeta, err := metadata.NewForConfig(nsConfig)
	if err != nil {
		return fmt.Errorf("namespace controller: %w", err)
	}
	nc := namespacecontroller.NewNamespaceController(ctx, nsClient, nsMeta, nsClient.Discovery().ServerPreferredNamespacedResources,
		factory.Core().V1().Namespaces(), 5*time.Minute, v1.FinalizerKubernetes)
	add(func(ctx context.Context) { nc.Run(ctx, controllerWorkers) })

	if client, _, err = clientFor("service-account-controller"); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	sac, err := serviceaccountcontroller.NewServiceAccountsController(logger, factory.Core().V1().ServiceAccounts(), factory.Core().V1().Namespaces(),
		client, serviceaccountcontroller.DefaultServiceAccountsControllerOptions())
	if err != nil {
		return fmt.Errorf("service account controller: %w", err)
	}
	add(func(ctx context.Context) { sac.Run(ctx, 1) })

	tokenClient, tokenConfig, err := clientFor("tokens-controller")
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("token controller key: %w", err)
	}
	generator, err := serviceaccount.JWTTokenGenerator(serviceaccount.LegacyIssuer, key)
	if err != nil {
		return fmt.Errorf("token controller: %w", err)
	}
	tc, err := serviceaccountcontroller.NewTokensController(logger, factory.Core().V1().ServiceAccounts(), factory.Core().V1().Secrets(), tokenClient,
		serviceaccountcontroller.TokensControllerOptions{TokenGenerator: generator, RootCA: tokenConfig.CAData})
	if err != nil {
		return fmt.Errorf("token controller: %w", err)
	}
	add(func(ctx context.Context) { tc.Run(ctx, 1) })

	// ResourceQuota admission refuses every pod of a namespace whose quota
	// this controller has not yet counted (status unknown).
	rqClient, _, err := clientFor("resourcequota-controller")
	if err != nil {
		return err
	}
	objectOrMetadata := informerfactory.NewInformerFactory(factory, metaFactory)
	quotaConfig, err := quotainstall.NewQuotaConfigurationForControllers(generic.ListerFuncForResourceFunc(factory.ForResource), factory)
	if err != nil {
		return fmt.Errorf("resource quota controller: %w", err)
	}
	rqDiscovery := rqClient.Discovery().ServerPreferredNamespacedResources
	rqc, err := resourcequota.NewController(ctx, &resourcequota.ControllerOptions{
		QuotaClient:               rqClient.CoreV1(),
		ResourceQuotaInformer:     factory.Core().V1().ResourceQuotas(),
		ResyncPeriod:              func() time.Duration { return quotaResync },
		InformerFactory:           objectOrMetadata,
		ReplenishmentResyncPeriod: func() time.Duration { return 0 },
		DiscoveryFunc:             rqDiscovery,
		IgnoredResourcesFunc:      quotaConfig.IgnoredResources,
		InformersStarted:          informersStarted,
		Registry:                  generic.NewRegistry(quotaConfig.Evaluators()),
		UpdateFilter:              quotainstall.DefaultUpdateFilter(),
	})
	if err != nil {
		return fmt.Errorf("resource quota controller: %w", err)
	}
	add(func(ctx context.Context) { rqc.Run(ctx, controllerWorkers) })
	add(func(ctx context.Context) { rqc.Sync(ctx, rqDiscovery, gcSyncPeriod) })

	factory.Start(ctx.Done())
	metaFactory.Start(ctx.Done())
	close(informersStarted)
	for _, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(ctx)
		}()
	}
	// Shut the informers down once the controllers have returned.
	go func() {
		wg.Wait()
		factory.Shutdown()
		metaFactory.Shutdown()
	}()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("controllers: the %v informer did not sync", typ)
		}
	}
	return waitForDefaultServiceAccount(ctx, shared)
}

// waitForDefaultServiceAccount polls until the ServiceAccount controller has
// created default/default.
func waitForDefaultServiceAccount(ctx context.Context, client kubernetes.Interface) error {
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the ServiceAccount controller did not create default/default: %w", err)
	}
	return nil
}
