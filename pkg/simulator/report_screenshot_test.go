package simulator

import (
	"context"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/chromiumtest"
	"github.com/gpusched/gpusched/pkg/simulator/report"
	"github.com/gpusched/gpusched/pkg/trace"
)

// reportColors are the report's first series colors and its floor color
// (report.html.tmpl's colors and floorColor).
var (
	seriesColors = []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xd6, 0x27, 0x28, 255}}
	floorColor   = color.RGBA{0x6a, 0x3d, 0x9a, 255}
)

// The zoomed chart's plot area in its 1000×380 SVG (axes' margins).
const plotLeft, plotRight, plotTop, plotBottom = 60, 980, 15, 335

// TestReportScreenshot renders the HTML report in Chromium and looks at the
// pictures, not only the DOM: the zoomed chart draws the floors as
// horizontal lines across the plot, under the best policy's curve, and
// spends its height on the region near arrived 100% (the best policy's
// curve sits well inside it, not squeezed at the bottom as in the full
// chart); the models chart has no numeric ticks among the model names.
func TestReportScreenshot(t *testing.T) {
	chromium := chromiumtest.Path(t)
	nodes, pods := trace.Synthetic(trace.SyntheticOptions{})
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Nodes: nodes, Pods: pods, Seeds: []int64{1, 2}, Arrival: trace.ArrivalFGD}
	if opts.Profiles, err = ProfilesFor(cfg, []string{"FragFit", "Random"}); err != nil {
		t.Fatal(err)
	}
	runs, err := Simulate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReport(opts, runs, 0)
	if rep.Floor == nil || rep.Floor.AnyPlacementPct.Mean <= 0 {
		t.Fatalf("the synthetic workload has no floor: %+v", rep.Floor)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := (&report.Sweep{Reports: []*report.Report{rep}}).WriteHTML(page); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}

	// One chart alone at the page's top left, pixel for SVG unit.
	shot := func(chart string) *image.RGBA {
		t.Helper()
		only := filepath.Join(dir, chart+".html")
		style := `<style>body{margin:0} body>*:not(section), section>*:not(figure), figure>*:not(svg) {visibility:hidden}
			svg[data-chart="` + chart + `"]{position:fixed;left:0;top:0;border:0;visibility:visible;z-index:1}</style></head>`
		if err := os.WriteFile(only, []byte(strings.Replace(string(html), "</head>", style, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, chart+".png")
		chromiumtest.Run(context.Background(), t, chromium, "--screenshot="+out, "--window-size=1000,380",
			"--force-device-scale-factor=1", "file://"+only)
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		rgba := image.NewRGBA(img.Bounds())
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
				rgba.Set(x, y, img.At(x, y))
			}
		}
		return rgba
	}

	zoom := shot("zoom")
	// A floor line: a row of the plot where most pixels are the floor color.
	floorRow := -1
	for y := plotTop; y <= plotBottom; y++ {
		if n := countNear(zoom, y, floorColor); n > (plotRight-plotLeft)/2 {
			floorRow = y
			break
		}
	}
	if floorRow < 0 {
		t.Fatal("no floor line across the zoomed chart")
	}
	// The best policy (FragFit, the first series) at arrived 100% and after:
	// the rows its color occupies in the right half of the plot.
	var rows []int
	for y := plotTop; y <= plotBottom; y++ {
		for x := (plotLeft + plotRight) / 2; x < plotRight; x++ {
			if near(zoom.RGBAAt(x, y), seriesColors[0]) {
				rows = append(rows, y)
				break
			}
		}
	}
	if len(rows) == 0 {
		t.Fatal("the best policy's curve is not in the zoomed chart")
	}
	mid := rows[len(rows)/2]
	height := float64(plotBottom - plotTop)
	if up := float64(plotBottom-mid) / height; up < 0.15 || up > 0.6 {
		t.Errorf("the best policy's curve sits %.0f%% up the zoomed chart, want 15%%..60%%: the chart does not zoom on it", 100*up)
	}
	if mid >= floorRow {
		t.Errorf("the best policy's curve (row %d) is not above the floor line (row %d)", mid, floorRow)
	}

	// The tables beside the charts: each seed's result and the difference
	// from the first policy; where the unallocated capacity sits.
	dom := renderHTML(t, page)
	seeds := regexp.MustCompile(`(?s)<table data-table="seeds">.*?</table>`).FindString(dom)
	for _, want := range []string{"<th>Random − FragFit</th>", "<td>1</td>", "<td>2</td>"} {
		if !strings.Contains(seeds, want) {
			t.Errorf("the per-seed table has no %s: %s", want, seeds)
		}
	}
	if stranded := regexp.MustCompile(`(?s)<table data-table="stranded">.*?</table>`).FindString(dom); !strings.Contains(stranded, "<td>total</td>") {
		t.Errorf("the stranded-capacity table has no total: %s", stranded)
	}

	// The models chart: its category axis has no numeric labels.
	svg := regexp.MustCompile(`(?s)<svg[^>]*data-chart="models"[^>]*>.*?</svg>`).FindString(dom)
	var models, numbers []string
	for _, m := range regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(svg, -1) {
		if regexp.MustCompile(`^\d+(\.\d+)?$`).MatchString(m[1]) {
			numbers = append(numbers, m[1])
		} else {
			models = append(models, m[1])
		}
	}
	if !slices.Equal(numbers, []string{"0.0", "20.0", "40.0", "60.0", "80.0", "100.0"}) {
		t.Errorf("the models chart's numeric labels are %v, want only the y axis's 0.0..100.0", numbers)
	}
	if len(models) < 3 {
		t.Errorf("the models chart labels %v, want the model names", models)
	}
	// In the picture: text under the axis, and none where the first numeric
	// tick ("0", centred on the axis' left end) used to be drawn.
	models4 := shot("models")
	dark := func(x0, x1 int) int {
		n := 0
		for y := plotBottom + 3; y <= plotBottom+22; y++ {
			for x := x0; x < x1; x++ {
				if c := models4.RGBAAt(x, y); c.R < 110 && c.G < 110 && c.B < 110 {
					n++
				}
			}
		}
		return n
	}
	if dark(plotLeft+10, plotRight) == 0 {
		t.Error("no model names under the models chart's axis")
	}
	if n := dark(plotLeft-5, plotLeft+5); n > 0 {
		t.Errorf("%d dark pixels at the category axis' left end: a numeric tick is drawn there", n)
	}
}

// countNear counts the pixels of row y in the plot close to c.
func countNear(img *image.RGBA, y int, c color.RGBA) int {
	n := 0
	for x := plotLeft; x < plotRight; x++ {
		if near(img.RGBAAt(x, y), c) {
			n++
		}
	}
	return n
}

// near reports whether two colors differ by at most 40 in every channel.
func near(a, b color.RGBA) bool {
	d := func(x, y uint8) int {
		if x > y {
			return int(x - y)
		}
		return int(y - x)
	}
	return d(a.R, b.R) <= 40 && d(a.G, b.G) <= 40 && d(a.B, b.B) <= 40
}
