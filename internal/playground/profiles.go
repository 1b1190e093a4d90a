package playground

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/gpusched/gpusched/internal/schedconfig"
)

// GangProfiles are the playground's profiles beside the example's, whose
// GPUGang places PodGroup gangs: one with upstream's GangScheduling of the
// Workload API ("gpusched-workload").
//
//go:embed gang-profiles.yaml
var GangProfiles string

// queueSortGPUGang is the queueSort of every profile of PlaygroundConfig.
var queueSortGPUGang = map[string]any{
	"enabled":  []any{map[string]any{"name": "GPUGang"}},
	"disabled": []any{map[string]any{"name": "*"}},
}

// PlaygroundConfig is the scheduler's configuration when Options names
// none: DefaultSchedulerConfig (the example) with GangProfiles appended,
// and every profile's queueSort GPUGang's; a profile without GPUGang args
// gets those of the last profile that sets them, as a scheduler needs one
// queue sort, with the same args, for all its profiles (the shipped
// profiles set the same).
func PlaygroundConfig() (string, error) {
	doc, err := schedconfig.Parse([]byte(DefaultSchedulerConfig))
	if err != nil {
		return "", err
	}
	var extra struct {
		Profiles []map[string]any `json:"profiles"`
	}
	if err := yaml.Unmarshal([]byte(GangProfiles), &extra); err != nil {
		return "", fmt.Errorf("gang-profiles.yaml: %w", err)
	}
	profiles, _ := doc["profiles"].([]any)
	for _, p := range extra.Profiles {
		profiles = append(profiles, p)
	}
	var gangArgs any // the pluginConfig entry of GPUGang, if a profile has one
	for _, p := range profiles {
		if m, ok := p.(map[string]any); ok {
			if c := gpuGangConfig(m); c != nil {
				gangArgs = c
			}
		}
	}
	for i, p := range profiles {
		m, ok := p.(map[string]any)
		if !ok {
			return "", fmt.Errorf("profile %d is not a mapping", i)
		}
		if gangArgs != nil && gpuGangConfig(m) == nil {
			config, _ := m["pluginConfig"].([]any)
			m["pluginConfig"] = append(config, gangArgs)
		}
		plugins, _ := m["plugins"].(map[string]any)
		if plugins == nil {
			plugins = map[string]any{}
			m["plugins"] = plugins
		}
		plugins["queueSort"] = queueSortGPUGang
	}
	doc["profiles"] = profiles
	out, err := doc.Encode()
	return string(out), err
}

// gpuGangConfig is the profile's pluginConfig entry for GPUGang, nil if none.
func gpuGangConfig(profile map[string]any) any {
	config, _ := profile["pluginConfig"].([]any)
	for _, c := range config {
		if m, ok := c.(map[string]any); ok && m["name"] == "GPUGang" {
			return c
		}
	}
	return nil
}
