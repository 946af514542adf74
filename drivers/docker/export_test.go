package docker

// Names the external tests (package docker_test) use; unexported in the
// package.
const (
	DefaultPidsLimit    = defaultPidsLimit
	FieldCPUs           = fieldCPUs
	FieldCaptureRepo    = fieldCaptureRepo
	FieldMemory         = fieldMemory
	FieldPidsLimit      = fieldPidsLimit
	FieldPorts          = fieldPorts
	FieldPullPolicy     = fieldPullPolicy
	FieldReadonlyRootfs = fieldReadonlyRootfs
	FieldStartupTimeout = fieldStartupTimeout
	FieldUser           = fieldUser
	FieldWorkdir        = fieldWorkdir
	LabelLease          = labelLease
	LabelManaged        = labelManaged
	LabelTemplate       = labelTemplate
	LocalRegistry       = localRegistry
	PullAlways          = pullAlways
	PullNever           = pullNever
	RunnerBinaryPath    = runnerBinaryPath
	RunnerSocketDir     = runnerSocketDir
	RunnerSocketName    = runnerSocketName
	RunnerStateDir      = runnerStateDir
)

// Concrete is the driver's own type, whose optional methods (List, Resume,
// Destroy, ...) the external tests call directly.
type Concrete = *driver

// NewConcrete returns the driver New returns, as its own type.
func NewConcrete(opts *Options) Concrete { return newDriver(opts) }
