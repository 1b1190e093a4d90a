package playground

import (
	"context"
	"fmt"
	"io"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	"sigs.k8s.io/kwok/pkg/apis/v1alpha1"
	kwokclient "sigs.k8s.io/kwok/pkg/client/clientset/versioned"
	"sigs.k8s.io/kwok/pkg/kwok/controllers"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/client"
	"sigs.k8s.io/yaml"
)

// AnnotationRunTime on a pod is how long it runs once Running before the
// simulated kubelet marks it Succeeded: a Go duration such as "30s". Pods
// without it run until deleted.
const AnnotationRunTime = "playground.gpusched.io/run-time"

// runTimeStage moves a Running pod that carries AnnotationRunTime to
// Succeeded once that time has passed, its containers terminated with exit
// code 0 (a kwok Stage).
const runTimeStage = `
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpusched-playground-run-time
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["` + AnnotationRunTime + `"]'
      operator: 'Exists'
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["` + AnnotationRunTime + `"]'
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Succeeded
      conditions:
      - type: Ready
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "False"
        reason: PodCompleted
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        ready: false
        started: false
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            reason: Completed
            finishedAt: {{ $now | Quote }}
      {{ end }}
`

// stages are the simulated kubelets' behaviour: kwok's fast node stages
// (Ready at once, heartbeats) and pod stages (Running at once, deleted at
// once when deletion is requested), plus runTimeStage.
func stages() (map[internalversion.StageResourceRef][]*internalversion.Stage, error) {
	out := map[internalversion.StageResourceRef][]*internalversion.Stage{}
	for _, raw := range []string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeat,
		podfast.DefaultPodReady,
		podfast.DefaultPodDelete,
		runTimeStage,
	} {
		stage, err := parseStage(raw)
		if err != nil {
			return nil, fmt.Errorf("parsing a kwok stage: %w", err)
		}
		ref := stage.Spec.ResourceRef
		out[ref] = append(out[ref], stage)
	}
	return out, nil
}

// parseStage reads one kwok Stage (YAML, kwok.x-k8s.io/v1alpha1) into kwok's
// internal form, as kwok's own config loader does for a Stage. That loader
// (sigs.k8s.io/kwok/pkg/config) is not used because it links Go's plugin
// package (through kustomize), which makes the binary bind every C symbol
// at start, and go-nvml's symbols (the node agents' mock NVML) are only
// there on a machine with NVIDIA's driver.
func parseStage(raw string) (*internalversion.Stage, error) {
	var stage v1alpha1.Stage
	if err := yaml.UnmarshalStrict([]byte(raw), &stage); err != nil {
		return nil, err
	}
	return internalversion.ConvertToInternalStage(&stage)
}

// startKubelets runs kwok's controllers in-process as the kubelets of every
// node annotated KwokNodeAnnotation=fake: the nodes turn and stay Ready,
// their pods go Running, and Succeeded after their AnnotationRunTime. Pod
// and node addresses are taken from 127.0.0.0/8. The controllers stop when
// ctx ends. Their log goes to logOut at info level, or nowhere when logOut
// is nil.
func startKubelets(ctx context.Context, kubeconfigPath string, logOut io.Writer) error {
	ctx = log.NewContext(ctx, log.NewLogger(logOut, log.LevelInfo))
	local, err := stages()
	if err != nil {
		return err
	}
	clients, err := client.NewClientset("", kubeconfigPath)
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	restConfig, err := clients.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	dynamicClient, err := clients.ToDynamicClient()
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	restMapper, err := clients.ToRESTMapper()
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	restClient, err := rest.RESTClientFor(restConfig)
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	typed, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	kwokTyped, err := kwokclient.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	id, err := controllers.Identity()
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	ctrl, err := controllers.NewController(controllers.Config{
		Clock:                             clock.RealClock{},
		DynamicClient:                     dynamicClient,
		RESTClient:                        restClient,
		RESTMapper:                        restMapper,
		ImpersonatingDynamicClient:        clients.ToImpersonatingDynamicClient(),
		ImpersonatingTypedClient:          clients.ToImpersonatingTypedClient(),
		TypedClient:                       typed,
		TypedKwokClient:                   kwokTyped,
		ManageNodesWithAnnotationSelector: KwokNodeAnnotation + "=fake",
		CIDR:                              "127.1.0.0/16",
		NodeIP:                            "127.0.0.1",
		LocalStages:                       local,
		PodPlayStageParallelism:           4,
		NodePlayStageParallelism:          4,
		PodsOnNodeSyncParallelism:         1,
		EnablePodsOnNodeSyncListPager:     true,
		ID:                                id,
	})
	if err != nil {
		return fmt.Errorf("simulated kubelets: %w", err)
	}
	if err := ctrl.Start(ctx); err != nil {
		return fmt.Errorf("starting the simulated kubelets: %w", err)
	}
	return nil
}
