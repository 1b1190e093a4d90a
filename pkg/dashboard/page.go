package dashboard

import (
	"bytes"
	_ "embed"
)

// The page is written as three files and served as one: its style and
// script are inlined into the HTML, so it loads nothing but the dashboard's
// own API.
var (
	//go:embed web/index.html
	pageHTML []byte
	//go:embed web/dashboard.css
	pageCSS []byte
	//go:embed web/dashboard.js
	pageJS []byte

	page = inline(pageHTML, pageCSS, pageJS)
)

// inline puts css and js in place of the HTML's /*STYLE*/ and /*SCRIPT*/
// markers.
func inline(html, css, js []byte) []byte {
	out := bytes.Replace(html, []byte("/*STYLE*/"), css, 1)
	return bytes.Replace(out, []byte("/*SCRIPT*/"), js, 1)
}
