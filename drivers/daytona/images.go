package daytona

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// snapshotPageLimit is the most snapshots one GET /snapshots answers
// (v0.190.0 apps/api/src/common/decorators/page-limit.decorator.ts: Max 200).
const snapshotPageLimit = 200

// apiSnapshotPage is the API's PaginatedSnapshots.
type apiSnapshotPage struct {
	Items      []apiSnapshot `json:"items"`
	Total      int           `json:"total"`
	Page       int           `json:"page"`
	TotalPages int           `json:"totalPages"`
}

// ListImages implements drivers.ImageLister: the account's snapshots (and
// the general ones it may use) whose name contains match, one read of
// GET /snapshots?limit=200&name=MATCH&sort=lastUsedAt&order=desc (v0.190.0
// snapshot.controller.ts getAllSnapshots: name is a case-insensitive
// partial match, general snapshots come last). Each is named by its id,
// the value snapshot_id takes; one is usable when it is active, or
// inactive (idle for 14 days) where the config lets the driver reactivate
// it.
func (d *driver) ListImages(ctx context.Context, cfg config.Config, match string) ([]drivers.ImageChoice, error) {
	s, err := d.open(cfg)
	if err != nil {
		return nil, err
	}
	q := url.Values{"page": {"1"}, "limit": {strconv.Itoa(snapshotPageLimit)}, "sort": {"lastUsedAt"}, "order": {"desc"}}
	if match != "" {
		q.Set("name", match)
	}
	var page apiSnapshotPage
	if err := s.c.call(ctx, http.MethodGet, "snapshots", q, nil, &page); err != nil {
		return nil, err
	}
	out := make([]drivers.ImageChoice, 0, len(page.Items))
	for _, it := range page.Items {
		usable := it.State == "active" || (it.State == "inactive" && s.reactivateOK)
		out = append(out, drivers.ImageChoice{Value: it.ID, Name: it.Name, Source: it.ImageName, State: it.State, Usable: usable})
	}
	return out, nil
}
