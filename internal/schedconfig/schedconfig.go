// Package schedconfig edits KubeSchedulerConfiguration YAML documents field by
// field: the gpusched command fills clientConnection.kubeconfig from
// --kubeconfig, the in-process control plane points a configuration at its
// own API server. Every field an edit does not touch is kept as written.
//
// It depends on nothing but a YAML codec, so the gpusched command can use it
// without linking the control plane.
package schedconfig

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// Document is a parsed KubeSchedulerConfiguration.
type Document map[string]any

// Parse parses a KubeSchedulerConfiguration YAML document and fills in
// apiVersion (kubescheduler.config.k8s.io/v1) and kind when missing. An
// empty document yields the default configuration.
func Parse(config []byte) (Document, error) {
	doc := Document{}
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return nil, fmt.Errorf("parsing KubeSchedulerConfiguration YAML: %w", err)
	}
	if doc == nil { // the document was empty or "null"
		doc = Document{}
	}
	if _, ok := doc["apiVersion"]; !ok {
		doc["apiVersion"] = "kubescheduler.config.k8s.io/v1"
	}
	if _, ok := doc["kind"]; !ok {
		doc["kind"] = "KubeSchedulerConfiguration"
	}
	return doc, nil
}

// Kubeconfig is clientConnection.kubeconfig, "" when unset.
func (d Document) Kubeconfig() (string, error) {
	cc, err := d.child("clientConnection")
	if err != nil {
		return "", err
	}
	switch v := cc["kubeconfig"].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	default:
		return "", fmt.Errorf("clientConnection.kubeconfig must be a string, got %T", v)
	}
}

// SetKubeconfig sets clientConnection.kubeconfig to path.
func (d Document) SetKubeconfig(path string) error {
	cc, err := d.child("clientConnection")
	if err != nil {
		return err
	}
	cc["kubeconfig"] = path
	return nil
}

// SetLeaderElect sets leaderElection.leaderElect.
func (d Document) SetLeaderElect(on bool) error {
	le, err := d.child("leaderElection")
	if err != nil {
		return err
	}
	le["leaderElect"] = on
	return nil
}

// Encode renders the document as YAML.
func (d Document) Encode() ([]byte, error) {
	out, err := yaml.Marshal(map[string]any(d))
	if err != nil {
		return nil, fmt.Errorf("encoding KubeSchedulerConfiguration: %w", err)
	}
	return out, nil
}

// child returns d[key] as a map, creating it when absent or null.
func (d Document) child(key string) (map[string]any, error) {
	switch v := d[key].(type) {
	case nil:
		m := map[string]any{}
		d[key] = m
		return m, nil
	case map[string]any:
		return v, nil
	default:
		return nil, fmt.Errorf("%s must be a mapping, got %T", key, v)
	}
}
