package discovery

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// nodes reads and patches Nodes with a REST client that knows only
// core/v1. client-go's typed clients register every API group's types at
// start: 15 MB of the agent's resident memory, on every GPU node, for
// nothing it uses (docs/benchmarks.md, "Node agent").
type nodes struct {
	client *rest.RESTClient
}

// NewNodeClient returns the publisher's client for Nodes, from cfg.
func NewNodeClient(cfg *rest.Config) (NodeClient, error) {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.APIPath = "/api"
	cfg.GroupVersion = &v1.SchemeGroupVersion
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return &nodes{client: client}, nil
}

// Get reads the Node name.
func (n *nodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1.Node, error) {
	out := &v1.Node{}
	err := n.client.Get().Resource("nodes").Name(name).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// Patch patches the Node name (or its subresource) and returns the result.
func (n *nodes) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1.Node, error) {
	out := &v1.Node{}
	err := n.client.Patch(pt).Resource("nodes").Name(name).SubResource(subresources...).
		VersionedParams(&opts, metav1.ParameterCodec).Body(data).Do(ctx).Into(out)
	return out, err
}
