package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
)

// nodesFromYAML reads Node objects: YAML or JSON documents, each a Node or a
// List of Nodes.
func nodesFromYAML(file string, data []byte) ([]*v1.Node, error) {
	nodes, err := objectsFromYAML[v1.Node](file, data, "Node")
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		return nil, &InputError{File: file, Msg: "no Node objects"}
	}
	for _, n := range nodes {
		if n.ResourceVersion == "" {
			n.ResourceVersion = "1" // the engine caches a node's inventory by version
		}
		if n.UID == "" {
			n.UID = types.UID("node-" + n.Name)
		}
	}
	return nodes, nil
}

// podsFromYAML reads Pod objects. A pod's creation and deletion times, for
// replay, are its metadata.creationTimestamp and metadata.deletionTimestamp,
// relative to the earliest creation time in the file; pods without a
// creationTimestamp arrive in file order with no departures.
func podsFromYAML(file string, data []byte) ([]Pod, error) {
	objs, err := objectsFromYAML[v1.Pod](file, data, "Pod")
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, &InputError{File: file, Msg: "no Pod objects"}
	}
	var start int64 = -1
	for _, p := range objs {
		if !p.CreationTimestamp.IsZero() && (start < 0 || p.CreationTimestamp.Unix() < start) {
			start = p.CreationTimestamp.Unix()
		}
	}
	pods := make([]Pod, len(objs))
	for i, p := range objs {
		if p.Namespace == "" {
			p.Namespace = Namespace
		}
		// Identity is namespace/name: the file's UIDs may repeat or be absent.
		p.UID = types.UID(p.Namespace + "/" + p.Name)
		p.Spec.NodeName = ""
		pods[i] = Pod{Pod: p}
		if start >= 0 && !p.CreationTimestamp.IsZero() {
			pods[i].Created = p.CreationTimestamp.Unix() - start
			pods[i].Deleted = NeverDeleted
			if p.DeletionTimestamp != nil {
				pods[i].Deleted = max(pods[i].Created, p.DeletionTimestamp.Unix()-start)
			}
			pods[i].HasTimes = true
		}
	}
	return pods, nil
}

// objectsFromYAML decodes every object of the given kind in a YAML stream.
// Errors carry the line and column of the offending value.
func objectsFromYAML[T any](file string, data []byte, kind string) ([]*T, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []*T
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, yamlSyntaxError(file, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		root := doc.Content[0]
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			continue // an empty document
		}
		items := []*yaml.Node{root}
		if k := mappingValue(root, "kind"); k != nil && strings.HasSuffix(k.Value, "List") {
			list := mappingValue(root, "items")
			if list == nil || list.Kind != yaml.SequenceNode {
				return nil, atNode(file, root, "a List without an items sequence: want items: [...]")
			}
			items = list.Content
		}
		for _, item := range items {
			obj, err := decodeObject[T](file, item, kind)
			if err != nil {
				return nil, err
			}
			out = append(out, obj)
		}
	}
}

func decodeObject[T any](file string, n *yaml.Node, kind string) (*T, error) {
	if n.Kind != yaml.MappingNode {
		return nil, atNode(file, n, fmt.Sprintf("want a %s object, found a %s", kind, nodeKind(n)))
	}
	if k := mappingValue(n, "kind"); k == nil || k.Value != kind {
		return nil, atNode(file, n, fmt.Sprintf("want kind: %s", kind))
	}
	if err := checkQuantities(file, n, ""); err != nil {
		return nil, err
	}
	var generic any
	if err := n.Decode(&generic); err != nil {
		return nil, atNode(file, n, err.Error())
	}
	raw, err := json.Marshal(generic)
	if err != nil {
		return nil, atNode(file, n, err.Error())
	}
	obj := new(T)
	strict, err := kjson.UnmarshalStrict(raw, obj)
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, atNode(file, locate(n, te.Field), fmt.Sprintf("%s: want a value of type %s, found %s", te.Field, te.Type, te.Value))
		}
		return nil, atNode(file, n, err.Error())
	}
	if len(strict) > 0 {
		msg := strict[0].Error()
		if m := unknownField.FindStringSubmatch(msg); m != nil {
			return nil, atNode(file, locate(n, m[1]), fmt.Sprintf("unknown field %q in a %s", m[1], kind))
		}
		return nil, atNode(file, n, msg)
	}
	return obj, nil
}

var unknownField = regexp.MustCompile(`unknown field "([^"]+)"`)

// quantityMaps are the keys whose values map resource names to quantities.
var quantityMaps = map[string]bool{"requests": true, "limits": true, "allocatable": true, "capacity": true, "overhead": true}

// checkQuantities parses every quantity in the object, so that a malformed
// one is reported where it is (the typed decoder reports no position).
func checkQuantities(file string, n *yaml.Node, key string) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if quantityMaps[k.Value] && v.Kind == yaml.MappingNode {
				for j := 0; j+1 < len(v.Content); j += 2 {
					q := v.Content[j+1]
					if _, err := resource.ParseQuantity(q.Value); err != nil || q.Kind != yaml.ScalarNode {
						return atNode(file, q, fmt.Sprintf("%s %s %q: want a quantity such as 500m, 2 or 4Gi", k.Value, v.Content[j].Value, q.Value))
					}
				}
				continue
			}
			if err := checkQuantities(file, v, k.Value); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if err := checkQuantities(file, c, key); err != nil {
				return err
			}
		}
	}
	return nil
}

// locate finds the node at a dotted field path such as
// "spec.containers[0].resources"; a path without indices takes the first
// element of each sequence. It returns the deepest node it reaches.
func locate(n *yaml.Node, path string) *yaml.Node {
	for part := range strings.SplitSeq(path, ".") {
		name, index := part, -1
		if open := strings.IndexByte(part, '['); open >= 0 && strings.HasSuffix(part, "]") {
			name = part[:open]
			index, _ = strconv.Atoi(part[open+1 : len(part)-1])
		}
		next := mappingValue(n, name)
		if next == nil {
			return n
		}
		n = next
		if n.Kind == yaml.SequenceNode && len(n.Content) > 0 {
			n = n.Content[max(0, min(index, len(n.Content)-1))]
		}
	}
	return n
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "sequence"
	case yaml.ScalarNode:
		return fmt.Sprintf("scalar %q", n.Value)
	}
	return "mapping"
}

func atNode(file string, n *yaml.Node, msg string) error {
	return &InputError{File: file, Line: n.Line, Column: n.Column, Msg: msg}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlSyntaxError(file string, err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &InputError{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &InputError{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
}
