package daytonafake

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// snapshot is one snapshot at the fake provider. Guarded by Server.mu.
type snapshot struct {
	id, name, imageName, state string
	cpu, mem, disk             float64
	created, updated           time.Time
	removeAt                   time.Time // when a removing snapshot is gone
	activeAt                   time.Time // when a pending snapshot is active
	files                      string    // captured home directory, "" for none
}

// Snapshot describes a snapshot as the fake holds it.
type Snapshot struct {
	ID        string
	Name      string
	ImageName string
	State     string
}

// imageNameRE is the API's IMAGE_NAME_REGEX (v0.190.0
// apps/api/src/sandbox/services/snapshot.service.ts), which checks both a
// snapshot's imageName and, in validateSnapshotName, its name.
var imageNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.\-:]+(/[a-zA-Z0-9_.\-:]+)*(@sha256:[a-f0-9]{64})?$`)

// The patterns of the API's IsSafeDisplayString (v0.190.0
// apps/api/src/common/validators/is-safe-string.validator.ts), which the
// name of CreateSnapshotDto and of CreateSandboxSnapshotDto must pass.
var (
	htmlTagRE  = regexp.MustCompile(`<[a-zA-Z/][^>]*>?`)
	urlRE      = regexp.MustCompile(`(?i)https?://|ftps?://|sftp://|ssh://|wss?://|file://|ldaps?://|javascript:|data:|mailto:|tel:|www\.`)
	controlRE  = regexp.MustCompile(`[\x00-\x08\x0B\x0C\x0E-\x1F\x7F]`)
	uuidMsg    = "Validation failed (uuid is expected)" // NestJS ParseUUIDPipe
	notSafeMsg = "name must not contain HTML tags, URLs, or control characters"
)

// validateDisplayName is the DTOs' @IsString() @IsSafeDisplayString() on
// name, as the API's ValidationPipe answers them (400, the messages joined
// by the exception filter).
func validateDisplayName(name *string) error {
	switch {
	case name == nil:
		return errors.New("name must be a string")
	case htmlTagRE.MatchString(*name), urlRE.MatchString(*name), controlRE.MatchString(*name):
		return errors.New(notSafeMsg)
	}
	return nil
}

// validateSnapshotName is snapshot.service.ts validateSnapshotName, which
// POST /snapshots applies after the DTO's checks (an empty name fails it).
func validateSnapshotName(name string) error {
	if !imageNameRE.MatchString(name) {
		//lint:ignore ST1005 the real Daytona server answers with this text word for word; the fake copies it.
		return errors.New("Invalid snapshot name format. May contain letters, digits, dots, colons, and dashes")
	}
	return nil
}

// validateImageName applies the API's rules for a snapshot's image: a tag
// or a digest is required, ":latest" is refused.
func validateImageName(name string) error {
	if strings.Contains(name, "@sha256:") {
		img, digest, _ := strings.Cut(name, "@sha256:")
		if img == "" || !regexp.MustCompile(`^[a-f0-9]{64}$`).MatchString(digest) {
			//lint:ignore ST1005 the real Daytona server answers with this text word for word; the fake copies it.
			return errors.New("Invalid digest format. Must be image@sha256:64_hex_characters")
		}
		return nil
	}
	if !strings.Contains(name, ":") || strings.HasSuffix(strings.TrimSpace(name), ":") {
		//lint:ignore ST1005 the real Daytona server answers with this text word for word; the fake copies it.
		return errors.New("Image name must include a tag (e.g., ubuntu:22.04) or digest (@sha256:...)")
	}
	if strings.HasSuffix(name, ":latest") {
		//lint:ignore ST1005 the real Daytona server answers with this text word for word; the fake copies it.
		return errors.New(`Images with tag ":latest" are not allowed`)
	}
	if !imageNameRE.MatchString(name) {
		//lint:ignore ST1005 the real Daytona server answers with this text word for word; the fake copies it.
		return errors.New("Invalid image name format. Must be lowercase, may contain digits, dots, dashes, and single slashes between components")
	}
	return nil
}

// gcSnapshots drops removing snapshots whose time has come and activates
// pending ones whose time has come (the snapshot manager's job in
// apps/api/src/sandbox/managers/snapshot.manager.ts).
func (s *Server) gcSnapshots() {
	now := s.clk.Now()
	for _, sn := range s.snapshots {
		if sn.state == "pending" && !now.Before(sn.activeAt) {
			sn.state, sn.updated = "active", now
		}
	}
	kept := s.saves[:0]
	for _, p := range s.saves {
		if now.Before(p.at) {
			kept = append(kept, p)
		} else {
			p.save()
		}
	}
	s.saves = kept
	for id, sn := range s.snapshots {
		if sn.state == "removing" && !now.Before(sn.removeAt) {
			if sn.files != "" {
				_ = os.RemoveAll(sn.files)
			}
			delete(s.snapshots, id)
		}
	}
}

// findSnapshot finds a snapshot as the API's snapshot guards do for GET and
// DELETE /snapshots/{id} (v0.190.0 apps/api/src/sandbox/guards/
// snapshot-access.guard.ts and snapshot-read-access.guard.ts): by id, else
// by name in the organization. A snapshot in any state is found, removing
// included, until the cleanup cron drops its row.
func (s *Server) findSnapshot(idOrName string) *snapshot {
	s.gcSnapshots()
	if uuid.Validate(idOrName) == nil {
		if sn, ok := s.snapshots[idOrName]; ok {
			return sn
		}
	}
	for _, sn := range s.snapshots {
		if sn.name == idOrName {
			return sn
		}
	}
	return nil
}

// snapshotNotFound is the guards' answer for an unknown id or name: the
// id lookup failed, then SnapshotService.getSnapshotByName threw.
func snapshotNotFound(idOrName string) string {
	return fmt.Sprintf("Snapshot with name %s not found", idOrName)
}

// resolveSnapshot resolves a create's snapshot (id or name) as the API's
// createFromSnapshot does; nil and the API's message when it fails.
func (s *Server) resolveSnapshot(idOrName string) (*snapshot, string) {
	s.gcSnapshots()
	var found []*snapshot
	for _, sn := range s.snapshots {
		if sn.name == idOrName || (uuid.Validate(idOrName) == nil && sn.id == idOrName) {
			found = append(found, sn)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Sprintf("Snapshot %s not found. Did you add it through the Daytona Dashboard?", idOrName)
	}
	i := slices.IndexFunc(found, func(sn *snapshot) bool { return sn.state == "active" })
	if i < 0 {
		return nil, fmt.Sprintf("Snapshot %s is %s", idOrName, found[0].state)
	}
	return found[i], ""
}

func (s *Server) snapshotDTO(sn *snapshot) map[string]any {
	return map[string]any{
		"id": sn.id, "organizationId": s.org, "general": false, "name": sn.name, "imageName": sn.imageName,
		"state": sn.state, "size": nil, "entrypoint": nil, "cpu": sn.cpu, "gpu": 0, "mem": sn.mem, "disk": sn.disk,
		"errorReason": nil, "createdAt": sn.created.UTC().Format(time.RFC3339Nano),
		"updatedAt": sn.updated.UTC().Format(time.RFC3339Nano), "lastUsedAt": nil, "ref": sn.imageName,
		"sandboxClass": "container",
	}
}

// newSnapshotLocked adds an active snapshot after the API's checks, in the
// order of v0.190.0 snapshot.service.ts createFromPull: the DTO's name
// checks, an image name is required, the snapshot name format, the image
// name format, then the unique name (409).
func (s *Server) newSnapshotLocked(name, imageName string) (*snapshot, int, error) {
	if err := validateDisplayName(&name); err != nil {
		return nil, http.StatusBadRequest, err
	}
	if imageName == "" {
		//lint:ignore ST1005 the real Daytona server answers with this text word for word; the fake copies it.
		return nil, http.StatusBadRequest, errors.New("Must specify an image name")
	}
	if err := validateSnapshotName(name); err != nil {
		return nil, http.StatusBadRequest, err
	}
	if err := validateImageName(imageName); err != nil {
		return nil, http.StatusBadRequest, err
	}
	s.gcSnapshots()
	for _, sn := range s.snapshots {
		if sn.name == name {
			return nil, http.StatusConflict, fmt.Errorf("Snapshot with name %q already exists for this organization", name)
		}
	}
	now := s.clk.Now()
	sn := &snapshot{
		id: uuid.NewString(), name: name, imageName: imageName, state: "active",
		cpu: 1, mem: 1, disk: 3, created: now, updated: now,
	}
	s.snapshots[sn.id] = sn
	return sn, http.StatusOK, nil
}

// CreateSnapshot adds an active snapshot named name for image imageName,
// with the API's rules (imageName needs a tag or digest and not ":latest";
// names are unique, else 409). Its id is a new UUID.
func (s *Server) CreateSnapshot(name, imageName string) (Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, _, err := s.newSnapshotLocked(name, imageName)
	if err != nil {
		return Snapshot{}, fmt.Errorf("daytonatest: %w", err)
	}
	return Snapshot{ID: sn.id, Name: sn.name, ImageName: sn.imageName, State: sn.state}, nil
}

// DeleteSnapshot deletes snapshot id as DELETE /snapshots/{id} does: it is
// removing, then gone after the StopDelay knob (at once with no delay).
func (s *Server) DeleteSnapshot(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcSnapshots()
	sn, ok := s.snapshots[id]
	if !ok {
		return fmt.Errorf("daytonatest: %s", snapshotNotFound(id))
	}
	s.removeSnapshotLocked(sn)
	return nil
}

// removeSnapshotLocked is v0.190.0 snapshot.service.ts removeSnapshot: the
// snapshot, in whatever state, is removing; the snapshot manager's
// checkSnapshotCleanup cron (managers/snapshot.manager.ts, every 10 s)
// then drops the row, here StopDelay later. Nothing checks the sandboxes
// made from it: the API deletes a snapshot that sandboxes use, and they
// run on (their containers live on the runner; the runner's image removal
// failing is "not critical" there); a create from it is refused once it is
// removing. A second delete while it is removing does not move its end.
func (s *Server) removeSnapshotLocked(sn *snapshot) {
	now := s.clk.Now()
	if sn.state != "removing" {
		sn.removeAt = now.Add(s.knobs.StopDelay)
	}
	sn.state, sn.updated = "removing", now
	s.gcSnapshots()
}

// LookupSnapshot returns the snapshot with id (never by name).
func (s *Server) LookupSnapshot(id string) (Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcSnapshots()
	sn, ok := s.snapshots[id]
	if !ok {
		return Snapshot{}, false
	}
	return Snapshot{ID: sn.id, Name: sn.name, ImageName: sn.imageName, State: sn.state}, true
}

// createSnapshotBody is the API's CreateSnapshot schema, every field.
type createSnapshotBody struct {
	Name         *string  `json:"name"`
	ImageName    string   `json:"imageName"`
	Entrypoint   []string `json:"entrypoint"`
	CPU          int      `json:"cpu"`
	GPU          int      `json:"gpu"`
	GPUType      []string `json:"gpuType"`
	Memory       int      `json:"memory"`
	Disk         int      `json:"disk"`
	BuildInfo    any      `json:"buildInfo"`
	RegionID     string   `json:"regionId"`
	SandboxClass string   `json:"sandboxClass"`
}

func (s *Server) createSnapshotHTTP(w http.ResponseWriter, r *http.Request) {
	var req createSnapshotBody
	if err := decodeStrict(r, &req); err != nil {
		apiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if req.BuildInfo != nil {
		apiError(w, r, http.StatusBadRequest, "daytonatest: declarative builds (buildInfo) are not supported by the fake")
		return
	}
	if req.Name == nil {
		apiError(w, r, http.StatusBadRequest, validateDisplayName(nil).Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, status, err := s.newSnapshotLocked(*req.Name, req.ImageName)
	if err != nil {
		apiError(w, r, status, err.Error())
		return
	}
	// The API creates it pending; the snapshot manager pulls it, then it is
	// active (snapshot.manager.ts).
	sn.state, sn.activeAt = "pending", s.clk.Now().Add(s.knobs.SnapshotDelay)
	if req.CPU > 0 {
		sn.cpu = float64(req.CPU)
	}
	if req.Memory > 0 {
		sn.mem = float64(req.Memory)
	}
	if req.Disk > 0 {
		sn.disk = float64(req.Disk)
	}
	writeJSON(w, http.StatusOK, s.snapshotDTO(sn))
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	sn := s.findSnapshot(id)
	if sn == nil {
		apiError(w, r, http.StatusNotFound, snapshotNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, s.snapshotDTO(sn))
}

// deleteSnapshotHTTP is DELETE /snapshots/{id} as v0.190.0 serves it
// (controllers/snapshot.controller.ts removeSnapshot): the access guard
// runs first and finds the snapshot by id or name (404 "Snapshot with name
// X not found" when neither matches, so a snapshot that is gone is 404),
// then ParseUUIDPipe refuses a name (400), then removeSnapshot marks it
// removing (200, empty body), whatever uses it.
func (s *Server) deleteSnapshotHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("id")
	sn := s.findSnapshot(id)
	switch {
	case sn == nil:
		apiError(w, r, http.StatusNotFound, snapshotNotFound(id))
		return
	case uuid.Validate(id) != nil:
		apiError(w, r, http.StatusBadRequest, uuidMsg)
		return
	}
	s.removeSnapshotLocked(sn)
	w.WriteHeader(http.StatusOK)
}

// listSnapshots is GET /snapshots as v0.190.0 serves it
// (controllers/snapshot.controller.ts getAllSnapshots,
// dto/list-snapshots-query.dto.ts, services/snapshot.service.ts): page
// from 1 (default 1), limit 1-200 (default 100), name a case-insensitive
// partial match, sort name, state, lastUsedAt (default) or createdAt and
// order asc or desc (default desc); the answer is PaginatedSnapshots with
// totalPages = ceil(total/limit). A query value out of range is 400.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, limit := 1, 100
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			apiError(w, r, http.StatusBadRequest, "page must not be less than 1")
			return
		}
		page = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			apiError(w, r, http.StatusBadRequest, "limit must be an integer number")
			return
		case n < 1:
			apiError(w, r, http.StatusBadRequest, "limit must not be less than 1")
			return
		case n > 200:
			apiError(w, r, http.StatusBadRequest, "limit must not be greater than 200")
			return
		}
		limit = n
	}
	field := q.Get("sort")
	switch field {
	case "":
		field = "lastUsedAt"
	case "name", "state", "lastUsedAt", "createdAt":
	default:
		apiError(w, r, http.StatusBadRequest, "sort must be one of the following values: name, state, lastUsedAt, createdAt")
		return
	}
	desc, ok := sortOrder(w, r)
	if !ok {
		return
	}
	match := strings.ToLower(q.Get("name"))

	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcSnapshots()
	var all []*snapshot
	for _, sn := range s.snapshots {
		if match == "" || strings.Contains(strings.ToLower(sn.name), match) {
			all = append(all, sn)
		}
	}
	// The order of v0.190.0 snapshot.service.ts getAllSnapshots: the
	// field in its direction, nulls last (lastUsedAt is null here: the
	// fake records no use), then createdAt descending (unless the field
	// is createdAt). The fake has no general snapshots, which come last.
	slices.SortStableFunc(all, func(a, b *snapshot) int {
		c := 0
		switch field {
		case "name":
			c = strings.Compare(a.name, b.name)
		case "state":
			c = strings.Compare(a.state, b.state)
		case "createdAt":
			c = a.created.Compare(b.created)
		}
		if desc {
			c = -c
		}
		if c == 0 && field != "createdAt" {
			c = b.created.Compare(a.created)
		}
		return c
	})
	total := len(all)
	items := []map[string]any{}
	if from := (page - 1) * limit; from < total {
		for _, sn := range all[from:min(from+limit, total)] {
			items = append(items, s.snapshotDTO(sn))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "total": total, "page": page, "totalPages": (total + limit - 1) / limit})
}

// snapshotSandbox is POST /sandbox/{id}/snapshot as v0.190.0's
// createSnapshotFromSandbox (apps/api/src/sandbox/services/sandbox.service.ts)
// and the job state handler (services/job-state-handler.service.ts
// handleCreateSandboxSnapshotJobCompletion) do it: an unknown sandbox is
// 404; the name must be a string that passes IsSafeDisplayString
// (dto/create-sandbox-snapshot.dto.ts; no format rule beyond that, unlike
// POST /snapshots); the sandbox must rest started or stopped (400), with no
// change pending (409); includeMemory is for Windows sandboxes only (400).
// It is snapshotting until the StopDelay knob passes. With job-based
// runners (the default) the sandbox returns to its state first and the
// snapshot (a copy of the sandbox's home directory) is saved SnapshotDelay
// later; with Knobs.SnapshotBeforeRestore (older runners, the background
// runV0SnapshotFromSandbox) the snapshot is saved before the state
// returns. Either way it is saved active (persistSnapshotFromSandbox). A
// duplicate name is not refused by the request: the save fails with a
// unique violation that is only logged, and no snapshot is made.
func (s *Server) snapshotSandbox(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name          *string `json:"name"`
		IncludeMemory bool    `json:"includeMemory"`
	}
	if err := decodeStrict(r, &req); err != nil {
		apiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.action(w, r) // the sandbox access guard runs before the pipe: 404 first
	if sb == nil {
		return
	}
	if err := validateDisplayName(req.Name); err != nil {
		apiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case sb.state != "started" && sb.state != "stopped":
		apiError(w, r, http.StatusBadRequest, "Sandbox must be in started or stopped state to create a snapshot")
		return
	case sb.pending || sb.state != sb.desired:
		apiError(w, r, http.StatusConflict, "Sandbox state change in progress")
		return
	case req.IncludeMemory:
		// Container and Linux VM sandboxes; Windows ones are not faked.
		apiError(w, r, http.StatusBadRequest, "includeMemory is only supported for Windows sandboxes")
		return
	}
	// No name check here: v0.190.0 createSnapshotFromSandbox
	// (sandbox.service.ts) hands the name to the runner, and a duplicate
	// fails only when the snapshot is saved.
	files := filepath.Join(s.dir, "snapshots", uuid.NewString())
	if err := os.MkdirAll(filepath.Dir(files), 0o700); err != nil {
		apiError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	if err := os.CopyFS(files, os.DirFS(sb.home)); err != nil {
		apiError(w, r, http.StatusInternalServerError, "daytonatest: copying the sandbox: "+err.Error())
		return
	}
	prev := sb.state
	name := *req.Name
	image := "daytonafake.local/" + sb.id + ":" + name
	s.begin(sb, "snapshotting", prev, s.knobs.StopDelay, 0)
	cpu, mem, disk := sb.cpu, sb.mem, sb.disk
	save := func() {
		now := s.clk.Now()
		for _, o := range s.snapshots {
			if o.name == name {
				// The name conflict surfaces on save: no snapshot is made.
				_ = os.RemoveAll(files)
				return
			}
		}
		// persistSnapshotFromSandbox (utils/persist-snapshot-from-sandbox.util.ts)
		// inserts the row active: a snapshot from a sandbox is never pending.
		sn := &snapshot{id: uuid.NewString(), name: name, imageName: image, state: "active",
			cpu: cpu, mem: mem, disk: disk, created: now, updated: now, files: files}
		s.snapshots[sn.id] = sn
	}
	if s.knobs.SnapshotBeforeRestore {
		// Older (v0) runners: the snapshot is persisted, then the state
		// restored.
		sb.after = save
	} else {
		// Job-based runners: the state is restored, then the snapshot is
		// saved, SnapshotDelay later.
		sb.after = func() { s.saves = append(s.saves, pendingSave{at: s.clk.Now().Add(s.knobs.SnapshotDelay), save: save}) }
	}
	writeJSON(w, http.StatusOK, s.dto(sb))
}

// SnapshotIdleLimit is how long a snapshot that is not general may stay
// unused before the API's cron marks it inactive (v0.190.0
// apps/api/src/sandbox/managers/snapshot.manager.ts,
// DEFAULT_SNAPSHOT_DEACTIVATION_TIMEOUT_MINUTES).
const SnapshotIdleLimit = 14 * 24 * time.Hour

// activationCooldown is how long after its deactivation a snapshot cannot
// be activated (snapshot.service.ts activateSnapshot: "Snapshot
// deactivation is still in progress").
const activationCooldown = 10 * time.Minute

// AgeSnapshot makes snapshot id as if it had been unused for idle: from
// SnapshotIdleLimit on it is inactive, deactivated when its idle time
// reached the limit (so AgeSnapshot(id, SnapshotIdleLimit+time.Hour) was
// deactivated an hour ago). Creating a sandbox from an inactive snapshot
// answers 400 "Snapshot <id or name> is inactive"; POST
// /snapshots/{id}/activate brings it back through pending.
func (s *Server) AgeSnapshot(id string, idle time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcSnapshots()
	sn, ok := s.snapshots[id]
	if !ok {
		return fmt.Errorf("daytonatest: snapshot %s not found", id)
	}
	if idle < SnapshotIdleLimit || sn.state != "active" {
		return nil
	}
	sn.state, sn.updated = "inactive", s.clk.Now().Add(-(idle - SnapshotIdleLimit))
	return nil
}

// activateSnapshot is POST /snapshots/{id}/activate as v0.190.0 serves it
// (snapshot.controller.ts takes the id through ParseUUIDPipe, never a name;
// snapshot.service.ts activateSnapshot): 404 for an unknown id, 400 when
// already active, when in another state than inactive, or within the
// cooldown after the deactivation; otherwise the snapshot is pending, then
// active after Knobs.SnapshotDelay.
func (s *Server) activateSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if uuid.Validate(id) != nil {
		apiError(w, r, http.StatusBadRequest, "Validation failed (uuid is expected)")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcSnapshots()
	sn, ok := s.snapshots[id]
	switch {
	case !ok:
		apiError(w, r, http.StatusNotFound, fmt.Sprintf("Snapshot %s not found", id))
		return
	case sn.state == "active":
		apiError(w, r, http.StatusBadRequest, fmt.Sprintf("Snapshot %s is already active", id))
		return
	case sn.state != "inactive":
		apiError(w, r, http.StatusBadRequest, fmt.Sprintf("Snapshot %s cannot be activated - it is in %s state", id, sn.state))
		return
	case s.clk.Now().Sub(sn.updated) < activationCooldown:
		apiError(w, r, http.StatusBadRequest, "Snapshot deactivation is still in progress. Please try again in a few minutes.")
		return
	}
	now := s.clk.Now()
	sn.state, sn.updated, sn.activeAt = "pending", now, now.Add(s.knobs.SnapshotDelay)
	writeJSON(w, http.StatusOK, s.snapshotDTO(sn))
}

// pendingSave is a snapshot a job-based runner saves after it restored the
// sandbox's state.
type pendingSave struct {
	at   time.Time
	save func()
}
