package daytona

// Names the external tests (package daytona_test) use; unexported in the
// package.
const (
	FieldTarget              = fieldTarget
	FieldLabels              = fieldLabels
	FieldAutoStopInterval    = fieldAutoStopInterval
	FieldAutoArchiveInterval = fieldAutoArchiveInterval
	FieldAutoDeleteInterval  = fieldAutoDeleteInterval
	FieldExecTimeout         = fieldExecTimeout
	FieldReactivateSnapshot  = fieldReactivateSnapshot
	LabelLeaseID             = labelLeaseID
	StartupBudget            = startupBudget
)

// Concrete is the driver's own type, whose optional methods (List, Resume,
// Destroy, ...) the external tests call directly.
type Concrete = *driver

// NewConcrete returns the driver New returns, as its own type.
func NewConcrete(opts *Options) Concrete { return newDriver(opts) }
