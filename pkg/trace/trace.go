package trace

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// InputError is a malformed input: where it is and what was expected there.
type InputError struct {
	File   string
	Line   int // 1-based; 0 when the error concerns the whole file
	Column int // 1-based byte column; 0 when unknown
	Msg    string
}

func (e *InputError) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Column == 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// Pod is one pod of a workload, with its lifetime in the trace.
type Pod struct {
	Pod *v1.Pod
	// Created and Deleted are the pod's creation and deletion times in
	// seconds from the start of the trace; HasTimes reports whether the input
	// gave them (replay arrival needs them).
	Created, Deleted int64
	HasTimes         bool
}

// LoadNodes reads a cluster: an Alibaba node CSV (.csv) or YAML of Node
// objects (.yaml, .yml, .json; documents separated by ---, or a List).
func LoadNodes(path string) ([]*v1.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if isCSV(path) {
		return nodesFromCSV(path, data)
	}
	return nodesFromYAML(path, data)
}

// LoadPods reads a workload: an Alibaba pod CSV (.csv; the full form or the
// five-column multi-GPU form) or YAML of Pod objects.
func LoadPods(path string) ([]Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if isCSV(path) {
		return podsFromCSV(path, data)
	}
	return podsFromYAML(path, data)
}

func isCSV(path string) bool {
	return strings.EqualFold(filepath.Ext(path), ".csv")
}
