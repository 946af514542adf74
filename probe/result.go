package probe

import (
	"strings"
	"time"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/secretcfg"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// The probe stages (Stage.Name). Stages run in this order; a probe leaves
// out the stages that do not apply to its target (no image stage for host
// drivers, no qualify stage for drafts), and records the ones after a
// failure as skipped (the release still runs).
const (
	// stageResolve loads the environment (or validates the draft) and its
	// driver.
	stageResolve = "resolve"
	// stageAcquire opens the host session or allocates the fresh sandbox.
	stageAcquire = "acquire"
	// stageDetect runs the detection script in one Exec.
	stageDetect = "detect"
	// stageRunner, in place of stageDetect for a runner-based probe
	// (Request.Runner, PRP-8), starts berth's runner in the sandbox under a
	// probe identity and takes its hello's platform and version.
	stageRunner = "runner"
	// stageIsolation measures the isolation a task inside the sandbox
	// sees (sandbox drivers; internal/isolation).
	stageIsolation = "isolation"
	// stageImage reads the live image identity (sandbox drivers).
	stageImage = "image"
	// stageRelease releases the lease with Destroy and confirms cleanup.
	stageRelease = "release"
	// stageQualify evaluates and records the qualification (saved sandbox
	// environments only).
	stageQualify = "qualify"
)

// Stage is the outcome and timing of one probe stage (PRB-5).
type Stage struct {
	// Name is the stage: "resolve" (load the environment or validate the
	// draft, and its driver), "acquire" (open the host session or allocate
	// the fresh sandbox), "detect" (the detection script's one Exec) or
	// "runner" (a runner-based probe, Request.Runner: berth's runner's
	// hello), "isolation" (the isolation a task inside the sandbox sees;
	// sandbox drivers), "image" (the live image identity; sandbox drivers),
	// "release" (destroy and confirm cleanup), "qualify" (evaluate and
	// record the qualification; saved sandbox environments), in this
	// order; a stage that does not apply to the target is left out.
	Name string `json:"name"`
	// Duration is how long the stage took (wall clock).
	Duration time.Duration `json:"duration"`
	// OK is true when the stage ran and succeeded; false when it failed
	// (Code says why) or was skipped: it did not run because an earlier
	// stage failed, and then its Code is "" and Note names that stage.
	OK bool `json:"ok"`
	// Code is the stable code of the stage's failure; "" when OK or
	// skipped.
	Code string `json:"code,omitempty"`
	// Error says what failed, the technical chain; never a secret.
	Error string `json:"error,omitempty"`
	// Message is the failure as one sentence for a person
	// (errcode.MessageOf of the stage's error); "" when OK.
	Message string `json:"message,omitempty"`
	// Note says what the stage found or why it was a no-op.
	Note string `json:"note,omitempty"`
}

// Cleanup reports the end of the probe's lease (PRB-3).
type Cleanup struct {
	// Confirmed is true only when the provider confirmed the sandbox (or
	// host session) ended, for the lease's provider lease id (LEASE-7).
	Confirmed bool `json:"confirmed"`
	// LeaseStatus is the lease record's status after release: released, or
	// pending_cleanup when the release was not proven.
	LeaseStatus lease.Status `json:"leaseStatus,omitempty"`
	// RecordRemoved is true for a draft probe whose cleanup was proven: its
	// write-ahead lease record was removed, so the probe left nothing
	// behind (PRB-4). A draft whose cleanup is unproven keeps a
	// pending_cleanup record (without any secret field) until a release
	// or sweep proves it, and RecordRemoved is false.
	RecordRemoved bool `json:"recordRemoved,omitempty"`
	// PendingCleanup is true when the sandbox may still exist at the
	// provider: the lease is pending cleanup (a Sweep retries it) or, for a
	// draft, the destroy was not confirmed.
	PendingCleanup bool `json:"pendingCleanup"`
	// Evidence is the provider's confirmation note, or why there is none.
	Evidence string `json:"evidence,omitempty"`
}

// Result is the outcome of a probe (PRB-5, PRB-6). A failing target is a
// Result with OK false, never an error. A Result never holds a secret: no
// config values, and error texts are scrubbed of the secret values the
// probe knew.
type Result struct {
	// OK is true when every stage that ran succeeded.
	OK bool `json:"ok"`
	// Driver is the driver name.
	Driver string `json:"driver"`
	// Environment and EnvironmentName identify the saved environment; ""
	// for a draft (ProbeDraft's results).
	Environment     string `json:"environment,omitempty"`
	EnvironmentName string `json:"environmentName,omitempty"`
	// Target names what was probed without secrets: "user@host:port" for
	// ssh-like drivers, the host name for local, "provider <driver>" (with
	// its region when configured) for sandbox drivers.
	Target string `json:"target"`
	// Message is one sentence for a person (at most 200 characters, no
	// requirement IDs): what was reached, or what failed and the fix when
	// there is one (the failed stage's Message), naming the target.
	Message string `json:"message"`
	// Summary is the longer account for an operator's log: what was
	// reached and measured, or the stage that failed with its code and
	// error; the cleanup. The qualification (QualificationDiagnostic) and
	// what the probe did not validate (NotValidated) are fields of their
	// own, not part of it.
	Summary string `json:"summary"`
	// NotValidated says plainly what a host probe did not validate (an
	// adapter, a workspace, task execution; PRB-1); "" for sandbox
	// targets.
	NotValidated string `json:"notValidated,omitempty"`
	// Code is "ok", or the stable code of the first failure
	// ("cleanup_failed" for an unconfirmed cleanup).
	Code string `json:"code"`
	// Stages lists the stages that ran, in order, with their timings.
	Stages []Stage `json:"stages"`
	// Hostname and Cwd are the target's host name and its verified working
	// directory (PRB-1, PRB-2); "" when not reached.
	Hostname string `json:"hostname,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
	// Platform is the measured platform; zero when not measured.
	Platform qualification.Platform `json:"platform,omitzero"`
	// Isolation is the level the probe measured inside the target
	// (drivers.Isolation's names: "none" for a host target, "container",
	// "gvisor", "microvm"); "" when it was not measured. For a sandbox it
	// is what a task sees: a kernel release equal to the engine's
	// (container), one that differs with /proc/version or the kernel log
	// naming gVisor (gvisor). A level below what the driver declares for
	// the config fails the probe with "isolation_mismatch". A qualification
	// records it (qualification.Record.Isolation); it is server-owned
	// (CFG-5).
	Isolation string `json:"isolation,omitempty"`
	// IsolationEvidence says what the measurement saw: the task's kernel
	// release, the engine's, /proc/version and whether the kernel log names
	// gVisor; "" when not measured.
	IsolationEvidence string `json:"isolationEvidence,omitempty"`
	// Forwarding is what a host target's server forwards for the runner's
	// ingress, measured by opening and closing a remote forward (nothing
	// uploaded): "unix", "tcp" (a port on its loopback only) or "none";
	// "" when the driver has no such measurement (not an ssh target) or it
	// was not reached. The measured fact lives in the probe result (and
	// the stored probe record): an operator saves it as the ssh config's
	// forwarding knob, and "none" there narrows runner_ingress away (CAP-2).
	Forwarding string `json:"forwarding,omitempty"`
	// RunnerVersion and RunnerSHA256 are what the runner's hello reported
	// in a runner-based probe (Request.Runner); "" otherwise.
	RunnerVersion string `json:"runnerVersion,omitempty"`
	RunnerSHA256  string `json:"runnerSha256,omitempty"`
	// ImageIdentity is the identity the live sandbox reported; zero when
	// none was reported.
	ImageIdentity images.Identity `json:"imageIdentity,omitzero"`
	// LeaseID is the probe's lease id ("" for a draft or when no lease was
	// made), so that an operator can follow a pending cleanup.
	LeaseID string `json:"leaseId,omitempty"`
	// Cleanup is nil when nothing was acquired.
	Cleanup *Cleanup `json:"cleanup,omitempty"`
	// PlatformQualificationRecorded is true only when this probe stored a
	// qualification record (QUAL-1).
	PlatformQualificationRecorded bool `json:"platformQualificationRecorded"`
	// QualificationDiagnostic says why a qualification was or was not
	// recorded (PRB-6); never nil: host targets say they have no image to
	// qualify ("host_target"), drafts that they are not
	// saved, and a failed probe names its first failed stage
	// ("probe_failed").
	QualificationDiagnostic *qualification.Diagnostic `json:"qualificationDiagnostic,omitempty"`
	// StartedAt and Duration time the whole probe.
	StartedAt time.Time     `json:"startedAt"`
	Duration  time.Duration `json:"duration"`
}

// scrubber replaces known secret values in texts that go into a Result, as
// a second line of defence behind the drivers' own guarantee. The zero
// scrubber changes nothing.
type scrubber func(string) string

func (s scrubber) scrub(text string) string {
	if s == nil {
		return text
	}
	return s(text)
}

// secretValues returns the scrubber of cfg's plain secret values: Secret
// fields and SecretMap values (pasted, for a draft).
func secretValues(schema *config.Schema, cfg config.Config) scrubber {
	var vals []string
	for _, v := range secretcfg.SecretValues(schema, cfg) {
		if len(v) >= 4 {
			vals = append(vals, v)
		}
	}
	return func(text string) string {
		for _, v := range vals {
			text = strings.ReplaceAll(text, v, config.Redacted)
		}
		return text
	}
}
