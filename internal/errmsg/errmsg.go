// Package errmsg makes the sentence for a person that an
// errcode.Error carries (issue 50): requirement IDs out, one sentence
// that starts with a capital and ends with a period, at most Max
// characters.
package errmsg

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Max is the longest message, in characters.
const Max = 200

// reqIDs matches a requirement ID and the punctuation around it: " (CFG-6)",
// " (CFG-5, CAP-3)", "CFG-9: ", "; see PRB-5".
var (
	reqParen = regexp.MustCompile(`\s*\((?:[A-Z]+-[0-9]+(?:,\s*|\s*and\s*)?)+\)`)
	reqBare  = regexp.MustCompile(`\s*\b(?:CFG|CAP|PRB|QUAL|IMG|LEASE|ASG|PRP|AUTH|UI|WS|ISO|PLG|SCALE)-[0-9]+\b:?`)
)

// Sentence returns s as a message: requirement IDs removed, the first
// letter upper-cased when the first word is a word (not an address, a
// path or a quoted name), a final
// period added, and cut at a word boundary with "…" past Max characters.
func Sentence(s string) string {
	s = reqParen.ReplaceAllString(s, "")
	s = reqBare.ReplaceAllString(s, "")
	s = strings.Join(strings.Fields(s), " ")
	s = strings.TrimRight(s, " ;,:")
	if s == "" {
		return ""
	}
	first, _, _ := strings.Cut(s, " ")
	word := strings.IndexFunc(strings.TrimRight(first, ":,;"), func(r rune) bool { return !unicode.IsLetter(r) }) < 0
	r, n := utf8.DecodeRuneInString(s)
	if word && unicode.IsLower(r) {
		s = string(unicode.ToUpper(r)) + s[n:]
	}
	if !strings.HasSuffix(s, ".") && !strings.HasSuffix(s, "?") && !strings.HasSuffix(s, "!") {
		s += "."
	}
	if utf8.RuneCountInString(s) > Max {
		rs := []rune(s)[:Max-1]
		cut := string(rs)
		if i := strings.LastIndexByte(cut, ' '); i > Max/2 {
			cut = cut[:i]
		}
		s = strings.TrimRight(cut, " ;,:.") + "…"
	}
	return s
}

// Name returns how a message names a record of kind ("environment") with
// label, a `"name" (id)` or `"name"` or a bare id: `environment "name"`,
// the name before (and instead of) the id.
func Name(kind, label string) string {
	if label == "" {
		return kind
	}
	if strings.HasPrefix(label, `"`) {
		if i := strings.Index(label[1:], `"`); i >= 0 {
			return kind + " " + label[:i+2]
		}
	}
	return kind + " " + label
}
