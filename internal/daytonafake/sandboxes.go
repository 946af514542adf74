package daytonafake

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// sandbox is one sandbox at the fake provider. Guarded by Server.mu.
type sandbox struct {
	id, name, snapshot string
	seq                int64
	env, labels        map[string]string
	cpu, mem, disk     float64
	target             string
	autoStop, autoArch int64
	autoDelete         int64
	created, updated   time.Time
	lastActivity       time.Time

	state, desired string
	pending        bool
	errorReason    string
	// the pending transition: it finishes in state next once the clock
	// reaches due and pollsLeft reads have happened, unless stuck.
	next      string
	due       time.Time
	pollsLeft int
	stuck     bool
	fail      string // errorReason the transition ends with
	after     func() // run when the transition finishes
	// then, if not "", is the state the next read shows while the
	// transition is still pending (the API answers a start with the state
	// unchanged, and its manager moves it on).
	then   string
	class  string // sandboxClass: container, linux-vm, windows
	daemon string // daemonVersion, "" when not reported

	home, tmp string
	procs     map[int]bool           // process group ids of running commands
	ptys      map[string]*ptySession // PTY sessions by id
}

// killAll ends every command and PTY session of the sandbox.
func (sb *sandbox) killAll() {
	for pgid := range sb.procs {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	for id, p := range sb.ptys {
		p.kill()
		delete(sb.ptys, id)
	}
}

// begin starts a transition of sb to next.
func (s *Server) begin(sb *sandbox, shown, next string, delay time.Duration, polls int) {
	sb.state, sb.next, sb.pending = shown, next, true
	sb.due, sb.pollsLeft, sb.stuck, sb.fail, sb.after, sb.then = s.clk.Now().Add(delay), polls, false, "", nil, ""
	sb.updated = s.clk.Now()
}

// advance finishes sb's pending transition when it is due. read says
// whether this access counts as a poll.
func (s *Server) advance(sb *sandbox, read bool) {
	if !sb.pending {
		return
	}
	if sb.then != "" {
		sb.state, sb.then = sb.then, ""
	}
	if read && sb.pollsLeft > 0 {
		sb.pollsLeft--
	}
	if sb.stuck || sb.pollsLeft > 0 || s.clk.Now().Before(sb.due) {
		return
	}
	sb.pending = false
	sb.updated = s.clk.Now()
	if sb.fail != "" {
		sb.state, sb.errorReason = "error", sb.fail
		return
	}
	sb.state = sb.next
	if sb.after != nil {
		sb.after()
		sb.after = nil
	}
	if sb.state == "stopped" || sb.state == "archived" || sb.state == "destroyed" || sb.state == "paused" {
		sb.killAll()
	}
	if sb.state == "destroyed" {
		_ = os.RemoveAll(filepath.Dir(sb.home))
	}
}

// lookup finds a sandbox by id, then by name, as the API does: destroyed
// ones are gone, and so are errored ones whose deletion was asked for.
func (s *Server) lookup(idOrName string, read bool) *sandbox {
	find := func(match func(*sandbox) bool) *sandbox {
		for _, sb := range s.sandboxes {
			if !match(sb) {
				continue
			}
			s.advance(sb, read)
			if sb.state == "destroyed" {
				continue
			}
			return sb
		}
		return nil
	}
	sb := find(func(sb *sandbox) bool { return sb.id == idOrName })
	if sb == nil {
		sb = find(func(sb *sandbox) bool { return sb.name == idOrName })
	}
	if sb != nil && (sb.state == "error" || sb.state == "build_failed") && sb.desired == "destroyed" {
		return nil
	}
	return sb
}

// dto renders the API's Sandbox schema.
func (s *Server) dto(sb *sandbox) map[string]any {
	m := map[string]any{
		"id": sb.id, "organizationId": s.org, "name": sb.name, "snapshot": sb.snapshot, "user": "daytona",
		"env": sb.env, "labels": sb.labels, "public": false, "networkBlockAll": false, "target": sb.target,
		"cpu": sb.cpu, "gpu": 0, "memory": sb.mem, "disk": sb.disk, "state": sb.state, "desiredState": sb.desired,
		"recoverable": false, "backupState": "None", "autoStopInterval": sb.autoStop,
		"autoArchiveInterval": sb.autoArch, "autoDeleteInterval": sb.autoDelete,
		"createdAt": sb.created.UTC().Format(time.RFC3339Nano), "updatedAt": sb.updated.UTC().Format(time.RFC3339Nano),
		"lastActivityAt": sb.lastActivity.UTC().Format(time.RFC3339Nano), "sandboxClass": sb.class, "toolboxProxyUrl": s.toolboxProxyURLLocked(),
	}
	if sb.errorReason != "" {
		m["errorReason"] = sb.errorReason
	}
	if sb.daemon != "" {
		m["daemonVersion"] = sb.daemon
	}
	return m
}

// createSandboxBody is the API's CreateSandbox schema, every field.
type createSandboxBody struct {
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	NetworkAllowList    string            `json:"networkAllowList"`
	DomainAllowList     string            `json:"domainAllowList"`
	Target              string            `json:"target"`
	CPU                 int               `json:"cpu"`
	GPU                 int               `json:"gpu"`
	GPUType             []string          `json:"gpuType"`
	Memory              int               `json:"memory"`
	Disk                int               `json:"disk"`
	AutoStopInterval    *int64            `json:"autoStopInterval"`
	AutoArchiveInterval *int64            `json:"autoArchiveInterval"`
	AutoDeleteInterval  *int64            `json:"autoDeleteInterval"`
	Volumes             []json.RawMessage `json:"volumes"`
	BuildInfo           json.RawMessage   `json:"buildInfo"`
	LinkedSandbox       string            `json:"linkedSandbox"`
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req createSandboxBody
	if err := decodeStrict(r, &req); err != nil {
		apiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case len(req.BuildInfo) > 0 && string(req.BuildInfo) != "null":
		apiError(w, r, http.StatusBadRequest, "daytonatest: declarative builds (buildInfo) are not supported by the fake")
		return
	case req.CPU != 0 || req.GPU != 0 || req.Memory != 0 || req.Disk != 0:
		apiError(w, r, http.StatusBadRequest, "Cannot specify Sandbox resources when using a snapshot")
		return
	case len(req.GPUType) > 0:
		apiError(w, r, http.StatusBadRequest, "Cannot specify GPU type when creating sandbox from snapshot. GPU type is inherited from snapshot.")
		return
	case len(req.Volumes) > 0 || req.LinkedSandbox != "":
		apiError(w, r, http.StatusBadRequest, "daytonatest: volumes and linked sandboxes are not supported by the fake")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, msg := s.resolveSnapshot(req.Snapshot)
	if snap == nil {
		apiError(w, r, http.StatusBadRequest, msg)
		return
	}
	id := uuid.NewString()
	name := req.Name
	if name == "" {
		name = id
	}
	for _, o := range s.sandboxes {
		s.advance(o, false)
		if o.state != "destroyed" && o.name == name {
			apiError(w, r, http.StatusConflict, fmt.Sprintf("Sandbox with name %s already exists", name))
			return
		}
	}
	s.seq++
	now := s.clk.Now()
	root := filepath.Join(s.dir, id)
	sb := &sandbox{
		id: id, name: name, snapshot: snap.name, seq: s.seq, env: orEmpty(req.Env), labels: orEmpty(req.Labels),
		cpu: snap.cpu, mem: snap.mem, disk: snap.disk, target: req.Target, autoStop: 15, autoArch: 10080,
		autoDelete: -1, created: now, updated: now, desired: "started",
		class: s.knobs.SandboxClass, daemon: s.knobs.DaemonVersion,
		home: filepath.Join(root, "home"), tmp: filepath.Join(root, "tmp"), procs: map[int]bool{}, ptys: map[string]*ptySession{},
	}
	if sb.target == "" {
		sb.target = "us"
	}
	if sb.class == "" {
		sb.class = "container"
	}
	if sb.daemon == "" && !s.knobs.NoDaemonVersion {
		sb.daemon = "0.190.0"
	}
	if req.AutoStopInterval != nil {
		sb.autoStop = *req.AutoStopInterval
	}
	if req.AutoArchiveInterval != nil {
		sb.autoArch = *req.AutoArchiveInterval
	}
	if req.AutoDeleteInterval != nil {
		sb.autoDelete = *req.AutoDeleteInterval
	}
	if err := s.makeHome(sb, snap); err != nil {
		apiError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	s.sandboxes[id] = sb
	s.touch(sb)
	k := s.knobs
	s.begin(sb, "creating", "started", k.StartDelay, k.StartPolls)
	sb.stuck, sb.fail = k.StuckCreating, k.FailStart
	// The API waits (up to 30 s) for the sandbox to start before it
	// answers; the fake compresses that wait to what is already due.
	s.advance(sb, false)
	if sb.state == "error" {
		apiError(w, r, http.StatusBadRequest, "Sandbox failed to start: "+sb.errorReason)
		return
	}
	writeJSON(w, http.StatusOK, s.dto(sb))
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return maps.Clone(m)
}

func (s *Server) makeHome(sb *sandbox, snap *snapshot) error {
	if snap.files != "" {
		if err := os.MkdirAll(filepath.Dir(sb.home), 0o700); err != nil {
			return err
		}
		if err := os.CopyFS(sb.home, os.DirFS(snap.files)); err != nil {
			return fmt.Errorf("daytonatest: copying snapshot files: %w", err)
		}
	} else if err := os.MkdirAll(sb.home, 0o700); err != nil {
		return err
	}
	return os.MkdirAll(sb.tmp, 0o700)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("sandboxIdOrName")
	sb := s.lookup(id, true)
	if sb == nil {
		apiError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", id))
		return
	}
	writeJSON(w, http.StatusOK, s.dto(sb))
}

// action looks up the sandbox of an action route; nil after a 404.
func (s *Server) action(w http.ResponseWriter, r *http.Request) *sandbox {
	id := r.PathValue("sandboxIdOrName")
	sb := s.lookup(id, false)
	if sb == nil {
		apiError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", id))
	}
	return sb
}

func errored(sb *sandbox) bool { return sb.state == "error" || sb.state == "build_failed" }

// transition reports whether sb may leave one of the states in from, and
// otherwise answers the request as the real API orders its checks: an
// errored sandbox is 400, a state change in progress is 409 (checked before
// and after the from states), any other state is 400 with notFrom.
func transition(w http.ResponseWriter, r *http.Request, sb *sandbox, notFrom string, from ...string) bool {
	switch {
	case errored(sb):
		apiError(w, r, http.StatusBadRequest, "Sandbox is in an errored state")
	case sb.state != sb.desired:
		apiError(w, r, http.StatusConflict, "Sandbox state change in progress")
	case !slices.Contains(from, sb.state):
		apiError(w, r, http.StatusBadRequest, notFrom)
	case sb.pending:
		apiError(w, r, http.StatusConflict, "Sandbox state change in progress")
	default:
		return true
	}
	return false
}

func (s *Server) startSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.action(w, r)
	if sb == nil {
		return
	}
	// v0.190.0 sandbox.service.ts start: started is a no-op; an errored
	// sandbox is 400; archiving towards archived may be started; stopped,
	// archived, archiving and paused are startable; paused only for VM
	// classes (422 otherwise).
	switch {
	case sb.state == "started" && sb.desired == "started":
		writeJSON(w, http.StatusOK, s.dto(sb))
		return
	case errored(sb):
		apiError(w, r, http.StatusBadRequest, "Sandbox is in an errored state")
		return
	case sb.state != sb.desired && (sb.desired != "archived" || (sb.state != "stopped" && sb.state != "archiving")):
		apiError(w, r, http.StatusConflict, "Sandbox state change in progress")
		return
	case !slices.Contains([]string{"stopped", "archived", "archiving", "paused"}, sb.state):
		apiError(w, r, http.StatusBadRequest, "Sandbox is not in valid state")
		return
	case sb.pending && sb.state != "archiving":
		apiError(w, r, http.StatusConflict, "Sandbox state change in progress")
		return
	case sb.state == "paused" && sb.class != "linux-vm" && sb.class != "windows":
		apiError(w, r, http.StatusUnprocessableEntity, "Resuming is not supported for this sandbox")
		return
	}
	then := map[string]string{"stopped": "starting", "archived": "restoring", "archiving": "restoring", "paused": "resuming"}[sb.state]
	k := s.knobs
	sb.desired = "started"
	s.begin(sb, sb.state, "started", k.StartDelay, k.StartPolls)
	sb.then = then
	sb.fail = k.FailStart
	// The answer shows the state unchanged (pending, desired started); the
	// next read shows the transition's own state.
	writeJSON(w, http.StatusOK, s.dto(sb))
}

// Pause pauses sandbox id as POST /sandbox/{id}/pause does (v0.190.0
// sandbox.service.ts pause): only a started VM sandbox (Knobs.SandboxClass
// linux-vm or windows) can pause; it is pausing, then paused after the
// StopDelay knob. A paused sandbox runs no commands; start resumes it and
// stop stops it.
func (s *Server) Pause(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.lookup(id, false)
	switch {
	case sb == nil:
		return fmt.Errorf("daytonatest: sandbox %s not found", id)
	case sb.class != "linux-vm" && sb.class != "windows":
		return fmt.Errorf("daytonatest: Pausing is not supported for this sandbox")
	case sb.state != "started" || sb.pending || sb.desired != "started":
		return fmt.Errorf("daytonatest: sandbox %s is %s, not started", id, sb.state)
	}
	sb.desired = "paused"
	s.begin(sb, "pausing", "paused", s.knobs.StopDelay, 0)
	return nil
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.action(w, r)
	switch {
	case sb == nil, !transition(w, r, sb, "Sandbox is not in a stoppable state", "started", "paused"):
		return
	}
	if sb.autoDelete == 0 {
		s.softDelete(sb) // ephemeral: a stop deletes
	} else {
		sb.desired = "stopped"
		s.begin(sb, "stopping", "stopped", s.knobs.StopDelay, 0)
	}
	writeJSON(w, http.StatusOK, s.dto(sb))
}

func (s *Server) archiveSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.action(w, r)
	switch {
	case sb == nil, !transition(w, r, sb, "Sandbox is not stopped", "stopped"):
		return
	case sb.autoDelete == 0:
		apiError(w, r, http.StatusBadRequest, "Ephemeral sandboxes cannot be archived")
		return
	}
	sb.desired = "archived"
	s.begin(sb, "archiving", "archived", s.knobs.StopDelay, 0)
	writeJSON(w, http.StatusOK, s.dto(sb))
}

// softDelete marks sb for deletion and frees its name, as the API does; it
// is gone (404) once the transition finishes.
func (s *Server) softDelete(sb *sandbox) {
	sb.desired = "destroyed"
	sb.name = fmt.Sprintf("DESTROYED_%s_%d", sb.name, s.clk.Now().UnixMilli())
	shown := sb.state
	if errored(sb) {
		shown = "destroying"
	}
	s.begin(sb, shown, "destroyed", s.knobs.StopDelay, 0)
	sb.killAll()
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.action(w, r)
	switch {
	case sb == nil:
		return
	case sb.pending:
		apiError(w, r, http.StatusConflict, "Sandbox state change in progress")
		return
	}
	s.softDelete(sb)
	writeJSON(w, http.StatusOK, s.dto(sb))
}

func (s *Server) toolboxProxyURL(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := r.PathValue("sandboxId")
	if s.lookup(id, false) == nil {
		apiError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID %s not found", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"url": s.toolboxProxyURLLocked()})
}
