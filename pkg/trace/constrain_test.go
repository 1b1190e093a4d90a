package trace

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// constrainInputs writes a pod list, a like list and a node list: T4 nodes
// of 2 GPUs, A100 nodes of 8.
func constrainInputs(t *testing.T) ConstrainOptions {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pods := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
	for i, shape := range []string{"1,500", "1,500", "1,250", "1,1000", "1,1000", "8,1000", "8,1000", "1,300", "0,0", "0,0"} {
		pods += "p" + string(rune('a'+i)) + ",4000,8192," + shape + ",,LS\n"
	}
	like := "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" +
		"s1,1000,1024,1,500,T4\n" + // shares: T4 only
		"w1,1000,1024,1,1000,A100|T4\n" + // one GPU: either
		"m1,1000,1024,8,1000,T4\n" + // several GPUs: T4, which no node hosts
		"m2,1000,1024,8,1000,A100\n" +
		"u1,1000,1024,1,1000,\n" // not limited: not drawn
	nodes := "sn,cpu_milli,memory_mib,gpu,model\n" +
		"n1,64000,262144,2,T4\nn2,64000,262144,8,A100\n"
	return ConstrainOptions{Pods: write("pods.csv", pods), Like: []string{write("like.csv", like)}, Nodes: write("nodes.csv", nodes), Seed: 7}
}

func readRows(t *testing.T, data []byte) [][]string {
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestConstrain: the variant limits the asked share of the GPU pods, each
// to models of a like pod of its shape that a node can host it on, keeps
// every other field, and is the same for the same seed.
func TestConstrain(t *testing.T) {
	opts := constrainInputs(t)
	opts.Fraction = 0.5 // of 8 GPU pods: 4
	var out bytes.Buffer
	if err := Constrain(opts, &out); err != nil {
		t.Fatal(err)
	}
	in, _ := os.ReadFile(opts.Pods)
	before, after := readRows(t, in), readRows(t, out.Bytes())
	if len(after) != len(before) {
		t.Fatalf("%d rows, want %d", len(after), len(before))
	}
	allowed := map[string][]string{ // shape (num_gpu,gpu_milli) → the specs it may get
		"1,500": {"T4"}, "1,250": {"T4"}, "1,300": {"T4"},
		"1,1000": {"A100|T4"},
		"8,1000": {"A100"}, // T4 has no node of 8 GPUs
	}
	limited := 0
	for r := 1; r < len(after); r++ {
		spec := after[r][5]
		for c := range before[r] {
			if c != 5 && after[r][c] != before[r][c] {
				t.Errorf("row %d column %d: %q, was %q", r, c, after[r][c], before[r][c])
			}
		}
		if spec == "" {
			continue
		}
		limited++
		shape := after[r][3] + "," + after[r][4]
		if !strings.Contains(strings.Join(allowed[shape], " "), spec) {
			t.Errorf("pod %s (%s) got models %q, want one of %q", after[r][0], shape, spec, allowed[shape])
		}
	}
	if limited != 4 {
		t.Errorf("%d pods limited to models, want 4 (half the 8 GPU pods)", limited)
	}
	var again bytes.Buffer
	if err := Constrain(opts, &again); err != nil || again.String() != out.String() {
		t.Errorf("the same seed wrote another list (%v)", err)
	}
	opts.Seed = 8
	var other bytes.Buffer
	if err := Constrain(opts, &other); err != nil || other.String() == out.String() {
		t.Errorf("another seed wrote the same list (%v)", err)
	}
	// None: the list as it was, even with nothing to draw from.
	opts.Fraction = 0
	var none bytes.Buffer
	if err := Constrain(ConstrainOptions{Pods: opts.Pods, Nodes: opts.Nodes, Like: []string{opts.Pods}, Fraction: 0}, &none); err != nil {
		t.Fatal(err)
	}
	if got := readRows(t, none.Bytes()); len(got) != len(before) || got[1][5] != "" {
		t.Errorf("fraction 0 changed the list: %v", got[:2])
	}
	// All of them: every GPU pod limited, the CPU pods not.
	opts.Fraction = 1
	var full bytes.Buffer
	if err := Constrain(opts, &full); err != nil {
		t.Fatal(err)
	}
	for _, row := range readRows(t, full.Bytes())[1:] {
		if (row[3] != "0") != (row[5] != "") {
			t.Errorf("pod %s with %s GPUs has models %q", row[0], row[3], row[5])
		}
	}
}

// TestConstrainRefuses: bad options are reported with the value and what
// is allowed, and nothing is written.
func TestConstrainRefuses(t *testing.T) {
	opts := constrainInputs(t)
	noLimited := filepath.Join(t.TempDir(), "plain.csv")
	if err := os.WriteFile(noLimited, []byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,1,1,1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(t.TempDir(), "extra.csv")
	if err := os.WriteFile(extra, []byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1,1,1,1000\ny,1,1,1,1000,T4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(o *ConstrainOptions)
		want   string
	}{
		// Without a gpu_spec column the extra field would become y's models.
		{"a row with a field past the header", func(o *ConstrainOptions) { o.Pods = extra }, "6 fields on line 3: want 5"},
		{"fraction above 1", func(o *ConstrainOptions) { o.Fraction = 1.5 }, "--fraction 1.5: want a share of the GPU pods in 0..1"},
		{"fraction below 0", func(o *ConstrainOptions) { o.Fraction = -0.1 }, "--fraction -0.1"},
		{"no limited pod to draw from", func(o *ConstrainOptions) { o.Like = []string{noLimited} }, "no pod limited to GPU models"},
		{"fewer than limited already", func(o *ConstrainOptions) { o.Pods = o.Like[0]; o.Fraction = 0.1 }, "limited to models already"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := opts
			o.Fraction = 0.5
			tt.change(&o)
			var out bytes.Buffer
			err := Constrain(o, &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("wrote %d bytes despite the error", out.Len())
			}
		})
	}
}
