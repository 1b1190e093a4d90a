package extender

import (
	"encoding/json"
	"strconv"
	"strings"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// Fast paths for the hot requests: a filter or prioritize request names
// thousands of nodes, and encoding/json's reflection over them costs more
// than the decisions. They cover exactly the shape the kube-scheduler sends
// (keys Pod, Nodes and NodeNames, node names in plain ASCII) and give up on
// anything else, which then goes through encoding/json unchanged; so they
// decide nothing about what is valid. FuzzDecodeArgs checks them against
// encoding/json.

// decodeArgsFast decodes an ExtenderArgs the way encoding/json would, or
// reports false, leaving args in an unspecified state, when data is not of
// the plain shape it handles (including every malformed input).
func decodeArgsFast(data []byte, args *extenderv1.ExtenderArgs) bool {
	p := parser{data: data}
	p.space()
	if !p.eat('{') {
		return false
	}
	var seenPod, seenNodes, seenNames bool
	p.space()
	if p.eat('}') {
		return p.end()
	}
	for {
		p.space()
		key, ok := p.plainString()
		if !ok {
			return false
		}
		p.space()
		if !p.eat(':') {
			return false
		}
		p.space()
		switch {
		case key == "Pod" && !seenPod:
			seenPod = true
			raw, ok := p.value()
			if !ok || json.Unmarshal(raw, &args.Pod) != nil {
				return false
			}
		case key == "Nodes" && !seenNodes:
			seenNodes = true
			raw, ok := p.value()
			if !ok || json.Unmarshal(raw, &args.Nodes) != nil {
				return false
			}
		case key == "NodeNames" && !seenNames:
			seenNames = true
			if !p.names(&args.NodeNames) {
				return false
			}
		default: // another key (encoding/json matches keys case-insensitively), or a repeated one
			return false
		}
		p.space()
		if p.eat('}') {
			return p.end()
		}
		if !p.eat(',') {
			return false
		}
	}
}

// parser reads JSON from data[pos:].
type parser struct {
	data []byte
	pos  int
}

func (p *parser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) eat(c byte) bool {
	if p.pos < len(p.data) && p.data[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// end: only white space may follow the value.
func (p *parser) end() bool {
	p.space()
	return p.pos == len(p.data)
}

// plainBytes returns the length of the run of bytes at s's start that need
// no escaping in JSON and no HTML escaping by encoding/json: printable ASCII
// but '"', '\\', '<', '>' and '&'.
func plainBytes(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return i
		}
	}
	return len(s)
}

// plainString reads a string without escapes or bytes outside printable
// ASCII.
func (p *parser) plainString() (string, bool) {
	b, ok := p.plainBytes()
	return string(b), ok
}

// plainBytes is plainString without the copy: the bytes between the quotes.
func (p *parser) plainBytes() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	rest := p.data[p.pos:]
	for i, c := range rest {
		if c == '"' {
			p.pos += i + 1
			return rest[:i], true
		}
		if c < 0x20 || c > 0x7e || c == '\\' {
			return nil, false
		}
	}
	return nil, false
}

// names reads null or an array of plain strings. The names share one
// allocation, a copy of the array's text: a request names thousands of nodes.
func (p *parser) names(out **[]string) bool {
	if p.literal("null") {
		*out = nil
		return true
	}
	start := p.pos
	if !p.eat('[') {
		return false
	}
	count := 0
	p.space()
	if !p.eat(']') {
		for {
			p.space()
			if _, ok := p.plainBytes(); !ok {
				return false
			}
			count++
			p.space()
			if p.eat(']') {
				break
			}
			if !p.eat(',') {
				return false
			}
		}
	}
	// The array is valid: its strings are the text between pairs of quotes.
	text := string(p.data[start:p.pos])
	names := getNames(count)
	for i := 0; i < len(text); i++ {
		if text[i] == '"' {
			end := i + 1 + strings.IndexByte(text[i+1:], '"')
			names = append(names, text[i+1:end])
			i = end
		}
	}
	*out = &names
	return true
}

func (p *parser) literal(lit string) bool {
	if len(p.data)-p.pos >= len(lit) && string(p.data[p.pos:p.pos+len(lit)]) == lit {
		p.pos += len(lit)
		return true
	}
	return false
}

// value returns the extent of the JSON value at pos: a string, an object or
// array with everything nested in it, or a literal up to the next delimiter.
// It only finds the extent; json.Unmarshal of the result checks the value.
func (p *parser) value() ([]byte, bool) {
	start := p.pos
	if p.pos >= len(p.data) {
		return nil, false
	}
	switch p.data[p.pos] {
	case '"':
		if !p.skipString() {
			return nil, false
		}
		return p.data[start:p.pos], true
	case '{', '[':
		depth := 0
		for p.pos < len(p.data) {
			switch p.data[p.pos] {
			case '"':
				if !p.skipString() {
					return nil, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					p.pos++
					return p.data[start:p.pos], true
				}
			}
			p.pos++
		}
		return nil, false
	}
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return p.data[start:p.pos], p.pos > start
		}
		p.pos++
	}
	return p.data[start:p.pos], p.pos > start
}

// skipString moves past the string that starts at pos.
func (p *parser) skipString() bool {
	for p.pos++; p.pos < len(p.data); p.pos++ {
		switch p.data[p.pos] {
		case '\\':
			p.pos++
		case '"':
			p.pos++
			return true
		}
	}
	return false
}

// appendString appends s as a JSON string, as encoding/json writes it.
func appendString(dst []byte, s string) []byte {
	if plainBytes(s) == len(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	raw, _ := json.Marshal(s) // a string always marshals
	return append(dst, raw...)
}

// appendFilterResult appends r as encoding/json writes it, but for the order
// of map keys; r must carry node names, not Node objects.
func appendFilterResult(dst []byte, r *extenderv1.ExtenderFilterResult) []byte {
	dst = append(dst, `{"Nodes":null,"NodeNames":`...)
	if r.NodeNames == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, name := range *r.NodeNames {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, name)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"FailedNodes":`...)
	dst = appendFailed(dst, r.FailedNodes)
	dst = append(dst, `,"FailedAndUnresolvableNodes":`...)
	dst = appendFailed(dst, r.FailedAndUnresolvableNodes)
	dst = append(dst, `,"Error":`...)
	dst = appendString(dst, r.Error)
	return append(dst, '}')
}

func appendFailed(dst []byte, m extenderv1.FailedNodesMap) []byte {
	if m == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '{')
	first := true
	for name, msg := range m {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, name)
		dst = append(dst, ':')
		dst = appendString(dst, msg)
	}
	return append(dst, '}')
}

// appendHostPriorities appends l as encoding/json writes it.
func appendHostPriorities(dst []byte, l extenderv1.HostPriorityList) []byte {
	if l == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i := range l {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"Host":`...)
		dst = appendString(dst, l[i].Host)
		dst = append(dst, `,"Score":`...)
		dst = strconv.AppendInt(dst, l[i].Score, 10)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}
