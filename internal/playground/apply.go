package playground

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/gpusched/gpusched/deploy/crds"
	"github.com/gpusched/gpusched/pkg/podgroup"
)

// applier creates the objects of YAML documents, of any kind the API server
// serves, in the "default" namespace unless they name another, as
// `kubectl create -f` does.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.ResettableRESTMapper
}

func newApplier(config *rest.Config) (*applier, error) {
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, err
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

// create creates every object of data (YAML documents separated by ---),
// in order; source names data in errors.
func (a *applier) create(ctx context.Context, source string, data []byte) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", source, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			a.mapper.Reset() // a CRD may have been installed since
			if mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return fmt.Errorf("%s: %s %s: %w", source, gvk.Kind, obj.GetName(), err)
			}
		}
		var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = DemoNamespace
			}
			ri = a.dyn.Resource(mapping.Resource).Namespace(ns)
		}
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: creating %s %s: %w", source, gvk.Kind, obj.GetName(), err)
		}
	}
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installPodGroupCRD creates deploy/crds' PodGroup CRD and waits until
// PodGroups can be listed.
func installPodGroupCRD(ctx context.Context, a *applier) error {
	if err := a.create(ctx, "the PodGroup CRD", crds.PodGroup); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := a.dyn.Resource(podgroup.Resource).Namespace(DemoNamespace).List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the PodGroup CRD was not established: %w", err)
	}
	a.mapper.Reset()
	return nil
}
