package trace

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/gpusched/gpusched/pkg/gpu"
)

// csvTable reads a CSV file with a header row and reports errors with their
// file, line and column.
type csvTable struct {
	file    string
	r       *csv.Reader
	columns map[string]int // header name → field index
	record  []string
}

func newCSVTable(file string, data []byte, required, optional []string) (*csvTable, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.ReuseRecord = true
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err == io.EOF {
		return nil, &InputError{File: file, Msg: fmt.Sprintf("empty file: want a header row with columns %s", strings.Join(required, ","))}
	}
	if err != nil {
		return nil, csvError(file, err)
	}
	t := &csvTable{file: file, r: r, columns: map[string]int{}}
	for i, name := range header {
		t.columns[strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))] = i
	}
	for _, name := range required {
		if _, ok := t.columns[name]; !ok {
			return nil, &InputError{File: file, Line: 1, Column: 1, Msg: fmt.Sprintf(
				"header %q lacks column %q: want columns %s (and optionally %s)",
				strings.Join(header, ","), name, strings.Join(required, ","), strings.Join(optional, ","))}
		}
	}
	return t, nil
}

// next reads the next row; it returns io.EOF after the last.
func (t *csvTable) next() error {
	record, err := t.r.Read()
	if err != nil {
		if err == io.EOF {
			return err
		}
		return csvError(t.file, err)
	}
	t.record = record
	if len(record) < len(t.columns) {
		line, _ := t.r.FieldPos(0)
		return &InputError{File: t.file, Line: line, Column: 1, Msg: fmt.Sprintf("%d fields: want %d, one per header column", len(record), len(t.columns))}
	}
	return nil
}

func (t *csvTable) has(column string) bool { _, ok := t.columns[column]; return ok }

// str is the row's value in column, or "" when the file has no such column.
func (t *csvTable) str(column string) string {
	i, ok := t.columns[column]
	if !ok {
		return ""
	}
	return strings.TrimSpace(t.record[i])
}

// errorAt reports a bad value in column of the current row.
func (t *csvTable) errorAt(column, format string, args ...any) error {
	line, col := t.r.FieldPos(t.columns[column])
	return &InputError{File: t.file, Line: line, Column: col,
		Msg: fmt.Sprintf("%s %q: ", column, t.str(column)) + fmt.Sprintf(format, args...)}
}

// int reads a non-negative integer no larger than limit from column.
func (t *csvTable) int(column string, limit int64) (int64, error) {
	v, err := strconv.ParseInt(t.str(column), 10, 64)
	if err != nil || v < 0 || v > limit {
		return 0, t.errorAt(column, "want an integer in 0..%d", limit)
	}
	return v, nil
}

func csvError(file string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &InputError{File: file, Line: pe.Line, Column: pe.Column, Msg: pe.Err.Error()}
	}
	return &InputError{File: file, Msg: err.Error()}
}

// Limits on trace values: far above any real machine, low enough that sums
// over a cluster cannot overflow.
const (
	maxMilliCPU  = 1 << 32
	maxMemoryMiB = 1 << 36
)

// NeverDeleted is the deletion time of a pod the trace never deletes, and
// the latest time a trace may name.
const NeverDeleted = 1 << 40

var nodeColumns = []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"}

// nodesFromCSV reads the Alibaba node list: sn,cpu_milli,memory_mib,gpu,model.
func nodesFromCSV(file string, data []byte) ([]*v1.Node, error) {
	t, err := newCSVTable(file, data, nodeColumns, nil)
	if err != nil {
		return nil, err
	}
	var nodes []*v1.Node
	seen := map[string]bool{}
	for {
		if err := t.next(); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		name := t.str("sn")
		if name == "" || seen[name] {
			return nil, t.errorAt("sn", "want a unique, non-empty node name")
		}
		seen[name] = true
		cpu, err := t.int("cpu_milli", maxMilliCPU)
		if err != nil {
			return nil, err
		}
		mem, err := t.int("memory_mib", maxMemoryMiB)
		if err != nil {
			return nil, err
		}
		gpus, err := t.int("gpu", gpu.MaxDevicesPerNode)
		if err != nil {
			return nil, err
		}
		model := t.str("model")
		if gpus > 0 && model == "" {
			return nil, t.errorAt("model", "want the GPU model of a node with GPUs")
		}
		nodes = append(nodes, NewNode(name, cpu, mem, int(gpus), model))
	}
	if len(nodes) == 0 {
		return nil, &InputError{File: file, Msg: "no nodes: want one row per node after the header"}
	}
	return nodes, nil
}

var (
	podColumns         = []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}
	podOptionalColumns = []string{"gpu_spec", "creation_time", "deletion_time"}
)

// podsFromCSV reads the Alibaba pod list. Required columns are
// name,cpu_milli,memory_mib,num_gpu,gpu_milli (the multi-GPU files have only
// these); gpu_spec ('|'-separated allowed models) and creation_time,
// deletion_time (seconds) are read when present.
func podsFromCSV(file string, data []byte) ([]Pod, error) {
	t, err := newCSVTable(file, data, podColumns, podOptionalColumns)
	if err != nil {
		return nil, err
	}
	hasTimes := t.has("creation_time") && t.has("deletion_time")
	var pods []Pod
	seen := map[string]bool{}
	for {
		if err := t.next(); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		p, err := tracePodFromRow(t, hasTimes)
		if err != nil {
			return nil, err
		}
		if seen[p.Pod.Name] {
			return nil, t.errorAt("name", "want a unique pod name")
		}
		seen[p.Pod.Name] = true
		pods = append(pods, p)
	}
	if len(pods) == 0 {
		return nil, &InputError{File: file, Msg: "no pods: want one row per pod after the header"}
	}
	return pods, nil
}

func tracePodFromRow(t *csvTable, hasTimes bool) (Pod, error) {
	name := t.str("name")
	if name == "" {
		return Pod{}, t.errorAt("name", "want a non-empty pod name")
	}
	cpu, err := t.int("cpu_milli", maxMilliCPU)
	if err != nil {
		return Pod{}, err
	}
	mem, err := t.int("memory_mib", maxMemoryMiB)
	if err != nil {
		return Pod{}, err
	}
	numGPU, err := t.int("num_gpu", gpu.MaxDevicesPerNode)
	if err != nil {
		return Pod{}, err
	}
	milli, err := t.int("gpu_milli", gpu.MilliPerGPU)
	if err != nil {
		return Pod{}, err
	}
	switch {
	case numGPU > 0 && milli == 0:
		return Pod{}, t.errorAt("gpu_milli", "want 1..1000 for a pod with num_gpu %d", numGPU)
	case numGPU > 1 && milli < gpu.MilliPerGPU:
		return Pod{}, t.errorAt("gpu_milli", "want 1000 for a pod with num_gpu %d: only single-GPU pods share a GPU", numGPU)
	}
	var models []string
	if spec := t.str("gpu_spec"); spec != "" {
		for m := range strings.SplitSeq(spec, "|") {
			if m = strings.TrimSpace(m); m == "" {
				return Pod{}, t.errorAt("gpu_spec", "want GPU models separated by '|', none empty")
			}
			models = append(models, m)
		}
	}
	p := Pod{Pod: NewPod(name, cpu, mem, int(numGPU), milli, models)}
	if hasTimes {
		if p.Created, err = t.int("creation_time", NeverDeleted); err != nil {
			return Pod{}, err
		}
		// A pod still running at the end of the trace has no deletion time.
		if t.str("deletion_time") == "" {
			p.Deleted = NeverDeleted
		} else if p.Deleted, err = t.int("deletion_time", NeverDeleted); err != nil {
			return Pod{}, err
		}
		if p.Deleted < p.Created {
			return Pod{}, t.errorAt("deletion_time", "want a time no earlier than creation_time %d", p.Created)
		}
		p.HasTimes = true
	}
	return p, nil
}
