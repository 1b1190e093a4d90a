package testcluster

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestInjectSchedulerConfig(t *testing.T) {
	in := `
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /somewhere/else
  qps: 100
leaderElection:
  leaderElect: true
profiles:
- schedulerName: gpu-scheduler
`
	out, err := injectSchedulerConfig(in, "/tmp/kc")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		APIVersion       string `json:"apiVersion"`
		ClientConnection struct {
			Kubeconfig string  `json:"kubeconfig"`
			QPS        float64 `json:"qps"`
		} `json:"clientConnection"`
		LeaderElection struct {
			LeaderElect *bool `json:"leaderElect"`
		} `json:"leaderElection"`
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.ClientConnection.Kubeconfig != "/tmp/kc" || got.ClientConnection.QPS != 100 {
		t.Errorf("clientConnection = %+v", got.ClientConnection)
	}
	if got.LeaderElection.LeaderElect == nil || *got.LeaderElection.LeaderElect {
		t.Errorf("leaderElect not forced to false:\n%s", out)
	}
	if len(got.Profiles) != 1 || got.Profiles[0].SchedulerName != "gpu-scheduler" {
		t.Errorf("profiles lost:\n%s", out)
	}

	// Empty input gets apiVersion/kind defaults.
	out, err = injectSchedulerConfig("", "/tmp/kc")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "kind: KubeSchedulerConfiguration") ||
		!strings.Contains(string(out), "apiVersion: kubescheduler.config.k8s.io/v1") {
		t.Errorf("defaults missing:\n%s", out)
	}

	if _, err := injectSchedulerConfig("clientConnection: 3", "/tmp/kc"); err == nil {
		t.Error("expected an error for a non-mapping clientConnection")
	}
}
