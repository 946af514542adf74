package daytona

// Wire types of the Daytona REST API (libs/api-client-go/api/openapi.yaml)
// and of the toolbox API (libs/toolbox-api-client-go/api/openapi.yaml). The
// JSON names are the API's exactly: the fake server (internal/daytonafake) rejects
// unknown fields, so a misspelt name fails the tests instead of being
// silently ignored, as the real API would.

// States of the API's SandboxState and SnapshotState enums that the driver
// acts on; every other state (creating, starting, restoring, ...) is waited
// through.
const (
	stateDestroyed     = "destroyed"
	stateStarted       = "started"
	stateStopped       = "stopped"
	stateStopping      = "stopping"
	stateError         = "error"
	stateBuildFailed   = "build_failed"
	stateArchived      = "archived"
	stateArchiving     = "archiving"
	stateSnapshotting  = "snapshotting"
	statePaused        = "paused"
	statePausing       = "pausing"
	desiredDestroyed   = "destroyed"
	snapshotActive     = "active"
	snapshotRemoving   = "removing"
	snapshotBuilding   = "building"
	snapshotPending    = "pending"
	snapshotInactive   = "inactive"
	snapshotPulling    = "pulling"
	snapshotBuildFail  = "build_failed"
	snapshotErrorState = "error"
)

// apiSandbox is the API's Sandbox (and SandboxListItem) schema, reduced to
// the fields the driver reads.
type apiSandbox struct {
	ID                  string            `json:"id"`
	OrganizationID      string            `json:"organizationId"`
	Name                string            `json:"name"`
	Snapshot            string            `json:"snapshot,omitempty"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env,omitempty"`
	Labels              map[string]string `json:"labels"`
	Target              string            `json:"target"`
	CPU                 float64           `json:"cpu"`
	Memory              float64           `json:"memory"`
	Disk                float64           `json:"disk"`
	State               string            `json:"state,omitempty"`
	DesiredState        string            `json:"desiredState,omitempty"`
	ErrorReason         string            `json:"errorReason,omitempty"`
	AutoStopInterval    *float64          `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *float64          `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *float64          `json:"autoDeleteInterval,omitempty"`
	CreatedAt           string            `json:"createdAt,omitempty"`
	UpdatedAt           string            `json:"updatedAt,omitempty"`
	ToolboxProxyURL     string            `json:"toolboxProxyUrl"`
	DaemonVersion       string            `json:"daemonVersion,omitempty"`
}

// apiCreateSandbox is the API's CreateSandbox schema, reduced to the fields
// the driver sends. Resources (cpu, memory, disk, gpu) are absent on purpose:
// the API refuses them when a sandbox is created from a snapshot ("Cannot
// specify Sandbox resources when using a snapshot"); they come from the
// snapshot.
type apiCreateSandbox struct {
	Name                string            `json:"name,omitempty"`
	Snapshot            string            `json:"snapshot"`
	Env                 map[string]string `json:"env,omitempty"`
	Labels              map[string]string `json:"labels,omitempty"`
	Target              string            `json:"target,omitempty"`
	AutoStopInterval    *int64            `json:"autoStopInterval,omitempty"`
	AutoArchiveInterval *int64            `json:"autoArchiveInterval,omitempty"`
	AutoDeleteInterval  *int64            `json:"autoDeleteInterval,omitempty"`
}

// apiListSandboxes is the API's ListSandboxesResponse (cursor pages).
type apiListSandboxes struct {
	Items      []apiSandbox `json:"items"`
	NextCursor *string      `json:"nextCursor"`
}

// apiSnapshot is the API's SnapshotDto, reduced.
type apiSnapshot struct {
	ID          string  `json:"id"`
	Name        string  `json:"name"`
	ImageName   string  `json:"imageName,omitempty"`
	State       string  `json:"state"`
	ErrorReason *string `json:"errorReason"`
	Ref         string  `json:"ref,omitempty"`
	CreatedAt   string  `json:"createdAt,omitempty"`
}

// apiCreateSandboxSnapshot is the API's CreateSandboxSnapshot.
type apiCreateSandboxSnapshot struct {
	Name string `json:"name"`
}

// apiToolboxProxyURL is the API's ToolboxProxyUrl.
type apiToolboxProxyURL struct {
	URL string `json:"url"`
}

// apiExecuteRequest is the toolbox API's ExecuteRequest: the command is run
// by the sandbox's shell; timeout is in whole seconds, 0 meaning none.
type apiExecuteRequest struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd,omitempty"`
	Envs    map[string]string `json:"envs,omitempty"`
	Timeout uint32            `json:"timeout,omitempty"`
}

// apiExecuteResponse is the toolbox API's ExecuteResponse: stdout and stderr
// combined in Result.
type apiExecuteResponse struct {
	ExitCode int    `json:"exitCode"`
	Result   string `json:"result"`
}

// apiErrorBody is the error body of the API (AllExceptionsFilter:
// statusCode, error, message, path, timestamp) and of the toolbox (common-go
// ErrorResponse: statusCode, message, code, path, method, timestamp).
type apiErrorBody struct {
	StatusCode int    `json:"statusCode"`
	Error      string `json:"error"`
	Code       string `json:"code"`
	Message    string `json:"message"`
}
