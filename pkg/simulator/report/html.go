package report

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"html/template"
	"os"
)

// reportTemplate is the HTML report: one self-contained page with a
// <section data-report="i"> per workload, whose script draws the charts as
// SVG from the reports' JSON; it loads nothing from the network. Each
// chart's <svg> gets data-drawn="true" once drawn, and the page's <body>
// data-error holds the message of any script error.
//
//go:embed report.html.tmpl
var reportTemplate string

var reportPage = template.Must(template.New("report").Parse(reportTemplate))

// WriteHTML writes the sweep as a self-contained HTML page to path.
func (s *Sweep) WriteHTML(path string) error {
	data, err := json.Marshal(s.Reports)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := reportPage.Execute(&buf, struct {
		*Sweep
		Data template.JS
	}{s, template.JS(data)}); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
