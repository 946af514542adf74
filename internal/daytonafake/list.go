package daytonafake

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// listSandboxes is GET /sandbox as v0.190.0 serves it
// (apps/api/src/sandbox/dto/list-sandboxes-query.dto.ts,
// adapters/sandbox-typeorm-search.adapter.ts): labels (JSON) filter, limit
// 1-200 (default 100), sort (default lastActivityAt) and order (default
// desc), id as the tie-breaker in the same direction, and a cursor holding
// the last item's sort value and id. The cursor is keyed on the sort
// field's current values: with the default sort, a sandbox whose activity
// is bumped during a walk (every toolbox request does) jumps ahead of the
// cursor and is missed by the walk. Destroyed sandboxes and errored ones
// being deleted are left out (unless includeErroredDeleted).
func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			apiError(w, r, http.StatusBadRequest, "limit must not be greater than 200")
			return
		}
		limit = n
	}
	var labels map[string]string
	if v := q.Get("labels"); v != "" {
		if err := json.Unmarshal([]byte(v), &labels); err != nil {
			apiError(w, r, http.StatusBadRequest, "Invalid labels JSON format")
			return
		}
	}
	field := q.Get("sort")
	if field == "" {
		field = "lastActivityAt"
	}
	key, ok := sortKeys[field]
	if !ok {
		apiError(w, r, http.StatusBadRequest, "sort must be one of the following values: name, cpu, memoryGib, diskGib, lastActivityAt, createdAt")
		return
	}
	desc, ok := sortOrder(w, r)
	if !ok {
		return
	}
	var after *listCursor
	if c := q.Get("cursor"); c != "" {
		var lc listCursor
		raw, err := base64.StdEncoding.DecodeString(c)
		if err != nil || json.Unmarshal(raw, &lc) != nil || lc.ID == "" {
			apiError(w, r, http.StatusBadRequest, "Invalid cursor provided: "+c)
			return
		}
		after = &lc
	}
	withErrDeleted := q.Get("includeErroredDeleted") == "true"
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.knobs.PageSize > 0 {
		limit = min(limit, s.knobs.PageSize)
	}
	cmp := func(av string, aid string, bv string, bid string) int {
		c := strings.Compare(av, bv)
		if c == 0 {
			c = strings.Compare(aid, bid)
		}
		if desc {
			c = -c
		}
		return c
	}
	var match []*sandbox
	for _, sb := range s.sandboxes {
		s.advance(sb, true)
		if sb.state == "destroyed" || (errored(sb) && sb.desired == "destroyed" && !withErrDeleted) {
			continue
		}
		if after != nil && cmp(key(sb), sb.id, after.SortValue, after.ID) <= 0 {
			continue
		}
		ok := true
		for k, v := range labels {
			if sb.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			match = append(match, sb)
		}
	}
	slices.SortFunc(match, func(a, b *sandbox) int { return cmp(key(a), a.id, key(b), b.id) })
	var next any
	if len(match) > limit {
		match = match[:limit]
		last := match[limit-1]
		raw, _ := json.Marshal(listCursor{SortValue: key(last), ID: last.id})
		next = base64.StdEncoding.EncodeToString(raw)
	}
	items := make([]map[string]any, len(match))
	for i, sb := range match {
		items[i] = s.dto(sb)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
}

// listCursor is the API's cursor: the last item's sort value and id.
type listCursor struct {
	SortValue string `json:"sortValue"`
	ID        string `json:"id"`
}

// sortKeys render a sandbox's value of each sort field as a string that
// orders as the value does.
var sortKeys = map[string]func(*sandbox) string{
	"name":           func(sb *sandbox) string { return sb.name },
	"cpu":            func(sb *sandbox) string { return fmt.Sprintf("%020.6f", sb.cpu) },
	"memoryGib":      func(sb *sandbox) string { return fmt.Sprintf("%020.6f", sb.mem) },
	"diskGib":        func(sb *sandbox) string { return fmt.Sprintf("%020.6f", sb.disk) },
	"createdAt":      func(sb *sandbox) string { return fmt.Sprintf("%020d", sb.created.UnixNano()) },
	"lastActivityAt": func(sb *sandbox) string { return fmt.Sprintf("%020d", sb.lastActivity.UnixNano()) },
}

// touch records activity on sb, as the proxy does on every toolbox request
// (apps/api/src/sandbox/services/sandbox-activity.service.ts). The time
// never repeats, so that the order of touches is the order of activity
// even on a fake clock.
func (s *Server) touch(sb *sandbox) {
	now := s.clk.Now()
	if !now.After(s.lastTouch) {
		now = s.lastTouch.Add(time.Nanosecond)
	}
	s.lastTouch = now
	sb.lastActivity = now
}

// sortOrder reads a list's order query parameter as the API's
// class-validator does (asc or desc, default desc): desc, or false ok after
// answering 400.
func sortOrder(w http.ResponseWriter, r *http.Request) (desc, ok bool) {
	switch r.URL.Query().Get("order") {
	case "", "desc":
		return true, true
	case "asc":
		return false, true
	}
	apiError(w, r, http.StatusBadRequest, "order must be one of the following values: asc, desc")
	return false, false
}
