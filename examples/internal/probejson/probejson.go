// Package probejson is the JSON that envctl and the server print for a
// probe: a probe.Result and its stages, field for field, with the facts
// a host reads off them (a draft's result, a skipped stage, a stage that
// is starting) as fields of their own, as both have always printed them.
package probejson

import (
	"time"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/qualification"
)

// Stage is a probe.Stage as JSON.
type Stage struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
	OK       bool          `json:"ok"`
	// Skipped: the stage did not run because an earlier one failed (not
	// OK, no code).
	Skipped bool `json:"skipped,omitempty"`
	// Running: the stage is starting (a progress event only).
	Running bool   `json:"running,omitempty"`
	Code    string `json:"code,omitempty"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	Note    string `json:"note,omitempty"`
}

// StageOf returns st as JSON; running is probe.Request.Progress's.
func StageOf(st probe.Stage, running bool) Stage {
	return Stage{Name: st.Name, Duration: st.Duration, OK: st.OK, Skipped: !running && !st.OK && st.Code == "",
		Running: running, Code: st.Code, Error: st.Error, Message: st.Message, Note: st.Note}
}

// Result is a probe.Result as JSON.
type Result struct {
	OK              bool   `json:"ok"`
	Driver          string `json:"driver"`
	Environment     string `json:"environment,omitempty"`
	EnvironmentName string `json:"environmentName,omitempty"`
	// Draft: a probe of a draft config (no environment).
	Draft                         bool                      `json:"draft,omitempty"`
	Target                        string                    `json:"target"`
	Message                       string                    `json:"message"`
	Summary                       string                    `json:"summary"`
	NotValidated                  string                    `json:"notValidated,omitempty"`
	Code                          string                    `json:"code"`
	Stages                        []Stage                   `json:"stages"`
	Hostname                      string                    `json:"hostname,omitempty"`
	Cwd                           string                    `json:"cwd,omitempty"`
	Platform                      qualification.Platform    `json:"platform,omitzero"`
	Isolation                     string                    `json:"isolation,omitempty"`
	IsolationEvidence             string                    `json:"isolationEvidence,omitempty"`
	Forwarding                    string                    `json:"forwarding,omitempty"`
	RunnerVersion                 string                    `json:"runnerVersion,omitempty"`
	RunnerSHA256                  string                    `json:"runnerSha256,omitempty"`
	ImageIdentity                 images.Identity           `json:"imageIdentity,omitzero"`
	LeaseID                       string                    `json:"leaseId,omitempty"`
	Cleanup                       *probe.Cleanup            `json:"cleanup,omitempty"`
	PlatformQualificationRecorded bool                      `json:"platformQualificationRecorded"`
	QualificationDiagnostic       *qualification.Diagnostic `json:"qualificationDiagnostic,omitempty"`
	StartedAt                     time.Time                 `json:"startedAt"`
	Duration                      time.Duration             `json:"duration"`
}

// Of returns res as JSON (nil for nil).
func Of(res *probe.Result) *Result {
	if res == nil {
		return nil
	}
	stages := make([]Stage, 0, len(res.Stages))
	for _, st := range res.Stages {
		stages = append(stages, StageOf(st, false))
	}
	if res.Stages == nil {
		stages = nil
	}
	return &Result{OK: res.OK, Driver: res.Driver, Environment: res.Environment, EnvironmentName: res.EnvironmentName,
		Draft: res.Environment == "", Target: res.Target, Message: res.Message, Summary: res.Summary,
		NotValidated: res.NotValidated, Code: res.Code, Stages: stages, Hostname: res.Hostname, Cwd: res.Cwd,
		Platform: res.Platform, Isolation: res.Isolation, IsolationEvidence: res.IsolationEvidence, Forwarding: res.Forwarding, RunnerVersion: res.RunnerVersion,
		RunnerSHA256: res.RunnerSHA256, ImageIdentity: res.ImageIdentity, LeaseID: res.LeaseID,
		Cleanup: res.Cleanup, PlatformQualificationRecorded: res.PlatformQualificationRecorded,
		QualificationDiagnostic: res.QualificationDiagnostic, StartedAt: res.StartedAt, Duration: res.Duration}
}
