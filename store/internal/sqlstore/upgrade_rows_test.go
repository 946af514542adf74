package sqlstore

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// upgradeRows are the representative rows of every table that the upgrade
// fixtures (testdata/upgrade) hold: writeUpgradeRows and
// TestWriteUpgradeFixtures of commit 6975b94 wrote them with the code of
// main before the store per package (testdata/upgrade/README.md), and
// TestUpgradeFromFixtures reads them back from the migrated copies. The
// values are fixed (no clock, no randomness) so that both sides agree;
// never change them, or the fixtures no longer match.
type upgradeRows struct {
	environments   []*environment.Environment
	bindings       []*environment.Binding
	health         []environment.ProviderHealth
	secretUses     map[string][]config.SecretRef // lease id -> refs in use
	retired        []config.SecretRef            // retired while in use
	qualifications []qualification.Record
	leases         []*lease.Lease
	authChecks     []handover.AuthCheck
	tickets        []prp.TicketRecord // the ones with Session set are consumed
	sessions       []controller.Session
	commands       []upgradeCommand
	events         []controller.EventRecord
	usage          map[string][]controller.TaskUsage // session id -> usage
}

// upgradeCommand is a journaled command and, if not nil, its result.
type upgradeCommand struct {
	session     string
	command     prp.Command
	result      *prp.Result
	secretsSent bool
}

// upgradeT0 is the base of every fixture time: whole microseconds in UTC,
// which both databases keep exactly.
var upgradeT0 = time.Date(2026, 12, 1, 9, 30, 15, 123456000, time.UTC)

// upgradeTicketHash is the fixed hash of fixture ticket n.
func upgradeTicketHash(n int) prp.TicketHash {
	return sha256.Sum256(fmt.Appendf(nil, "berth upgrade fixture ticket %d", n))
}

func makeUpgradeRows() upgradeRows {
	t := func(d time.Duration) time.Time { return upgradeT0.Add(d) }
	var r upgradeRows
	r.environments = []*environment.Environment{{
		ID: "env_ssh", Name: "build-ssh", Description: "an SSH build host", Driver: "ssh", Status: environment.StatusActive,
		Config: config.Config{
			"host": "build-1.example.test", "port": int64(2222), "user": "ci",
			"private_key": config.SecretRef{ID: "sec_key", Version: 2},
		},
		Env:      map[string]string{"LANG": "C.UTF-8"},
		Metadata: map[string]string{"owner": "ops"},
		Revision: 3, CreatedAt: t(0), UpdatedAt: t(time.Hour), CreatedBy: "admin-1", UpdatedBy: "admin-2",
	}, {
		ID: "env_docker", Name: "docker-debian", Driver: "docker", Status: environment.StatusActive,
		Config: config.Config{
			"image": "127.0.0.1:5000/debian@sha256:" + fmt.Sprintf("%064x", 7),
			"env":   map[string]any{"API_TOKEN": config.SecretRef{ID: "sec_tok", Version: 1}},
		},
		Revision: 1, CreatedAt: t(time.Minute), UpdatedAt: t(time.Minute), CreatedBy: "admin-1", UpdatedBy: "admin-1",
	}, {
		ID: "env_old", Name: "old-local", Description: "archived", Driver: "local", Status: environment.StatusArchived,
		Revision: 2, CreatedAt: t(2 * time.Minute), UpdatedAt: t(3 * time.Minute), CreatedBy: "admin-1", UpdatedBy: "admin-1",
	}}
	r.bindings = []*environment.Binding{{
		BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws-1", Company: "acme"}, EnvironmentID: "env_ssh",
		Revision: 2, CreatedAt: t(0), UpdatedAt: t(time.Second), CreatedBy: "admin-1", UpdatedBy: "admin-2",
	}, {
		BindingRef: environment.BindingRef{Kind: environment.BindingProject, Key: "proj-1", Company: "acme"}, EnvironmentID: "env_docker",
		Revision: 1, CreatedAt: t(time.Second), UpdatedAt: t(time.Second), CreatedBy: "admin-1", UpdatedBy: "admin-1",
	}, {
		BindingRef: environment.BindingRef{Kind: environment.BindingInstanceDefault}, EnvironmentID: "env_docker",
		Revision: 1, CreatedAt: t(2 * time.Second), UpdatedAt: t(2 * time.Second), CreatedBy: "admin-1", UpdatedBy: "admin-1",
	}}
	r.health = []environment.ProviderHealth{
		{Driver: "docker", Endpoint: "unix:///var/run/docker.sock", Available: true, CheckedAt: t(4 * time.Minute)},
		{Driver: "daytona", Endpoint: "https://daytona.example.test", Available: false, Code: string("unavailable"), Reason: "connection refused", CheckedAt: t(5 * time.Minute)},
	}
	r.secretUses = map[string][]config.SecretRef{
		"lease_active": {{ID: "sec_key", Version: 1}, {ID: "sec_key", Version: 2}},
		"lease_draft":  {{ID: "sec_tok", Version: 1}},
	}
	r.retired = []config.SecretRef{{ID: "sec_key", Version: 1}}
	r.qualifications = []qualification.Record{{
		Company: "acme", Environment: "env_docker", Fingerprint: "sha256:" + fmt.Sprintf("%064x", 11),
		Image:    images.MustParseIdentity("127.0.0.1:5000/debian@sha256:" + fmt.Sprintf("%064x", 7)),
		Platform: mustPlatform("linux/amd64 libc=glibc:2.36 kernel=6.1.0-18-amd64 release=debian:12"),
		LeaseID:  "lease_released", RecordedAt: t(6 * time.Minute),
	}, {
		Company: "globex", Environment: "env_docker", Fingerprint: "sha256:" + fmt.Sprintf("%064x", 12),
		Image:    images.MustParseIdentity("127.0.0.1:5000/debian@sha256:" + fmt.Sprintf("%064x", 7)),
		Template: "snapshot:fake/template-1",
		Platform: mustPlatform("linux/arm64 libc=musl:1.2.4 release=alpine:3.19"),
		LeaseID:  "lease_q2", RecordedAt: t(7 * time.Minute), InvalidatedAt: t(8 * time.Minute), InvalidReason: "image moved",
	}}
	labels := func(id string) map[string]string {
		return map[string]string{"berth.lease": id, "berth.instance": "upgrade"}
	}
	r.leases = []*lease.Lease{{
		ID: "lease_active", Company: "acme", Environment: "env_ssh", Workspace: "ws-1", Run: "run-1",
		Status: lease.StatusActive, Policy: lease.Ephemeral, Provider: "ssh", ProviderLeaseID: "berth-lease_active",
		AcquiredAt: t(10 * time.Minute), LastUsedAt: t(11 * time.Minute), ExpiresAt: t(70 * time.Minute),
		Fingerprint: "sha256:aa", ReuseKey: "reuse-ws-1", RunKey: "run-key-1", Uses: 2,
		Config:   config.Config{"host": "build-1.example.test", "private_key": config.SecretRef{ID: "sec_key", Version: 2}},
		Labels:   labels("lease_active"),
		Metadata: map[string]string{"task": "make test"},
		Holder:   "host-a", HolderUntil: t(12 * time.Minute),
	}, {
		ID: "lease_released", Company: "acme", Environment: "env_docker", Run: "run-2",
		Status: lease.StatusReleased, Policy: lease.Ephemeral, Provider: "docker", ProviderLeaseID: "c0ffee",
		AcquiredAt: t(13 * time.Minute), LastUsedAt: t(14 * time.Minute), ReleasedAt: t(15 * time.Minute),
		Cleanup: "confirmed", CleanupDisposition: drivers.Destroy, CleanupAttempts: 1,
		CleanupEvidence: "container c0ffee removed", CleanupEvidenceKind: drivers.EvidenceProvider,
		Fingerprint: "sha256:bb", Labels: labels("lease_released"),
	}, {
		ID: "lease_draft", Company: "acme", Environment: "env_docker",
		Status: lease.StatusPendingCleanup, Policy: lease.Ephemeral, Provider: "docker", ProviderLeaseID: "dead00",
		AcquiredAt: t(16 * time.Minute), ReleasedAt: t(17 * time.Minute),
		FailureReason: "probe: timed out", Cleanup: "pending", CleanupDisposition: drivers.Destroy,
		AfterCleanup: lease.StatusFailed, CleanupAttempts: 3,
		Fingerprint: "sha256:cc", Replaces: "lease_released", ReplaceReason: "unhealthy",
		Labels:    labels("lease_draft"),
		ClaimedBy: "sweeper-1", ClaimedUntil: t(18 * time.Minute), Draft: true,
	}, {
		ID: "lease_failed", Company: "globex", Environment: "env_ssh",
		Status: lease.StatusFailed, Policy: lease.Ephemeral, Provider: "ssh",
		AcquiredAt: t(19 * time.Minute), ReleasedAt: t(20 * time.Minute), FailureReason: "dial: connection refused",
		Cleanup: "confirmed", CleanupEvidence: "cgroup berth-lease_failed empty", CleanupEvidenceKind: drivers.EvidenceCgroup,
		Fingerprint: "sha256:dd", Labels: labels("lease_failed"),
	}}
	r.authChecks = []handover.AuthCheck{{
		Company: "acme", AccountRef: "secret:sec_acct@v1", Version: 2, Status: handover.StatusSucceeded,
		Fingerprint: "sha256:ab", Provider: handover.Provider{Driver: "daytona", Account: "secret:sec_acct@v1"},
		Projects: []string{"proj-1", "proj-2"}, Environment: "env_docker", Preparation: "prep_2",
		PreparedAt: t(21 * time.Minute), PreparedBy: "op-1", CheckedAt: t(22 * time.Minute), CheckedBy: "checker", Message: "ok",
	}, {
		Company: "acme", AccountRef: "secret:sec_other@v3", Version: 1, Status: handover.StatusPending,
		Fingerprint: "sha256:cd", Provider: handover.Provider{Driver: "docker", Account: "secret:sec_other@v3"},
		Projects: []string{}, Environment: "env_docker", Preparation: "prep_1",
		PreparedAt: t(23 * time.Minute), PreparedBy: "op-2",
	}}
	r.tickets = []prp.TicketRecord{{
		Hash: upgradeTicketHash(1), Lease: "lease_active", Run: "run-1", Company: "acme", Scope: prp.ScopeTask,
		CreatedAt: t(30 * time.Minute), ExpiresAt: t(35 * time.Minute), UsedAt: t(31 * time.Minute), Session: "s_1", Holder: true,
	}, {
		Hash: upgradeTicketHash(2), Lease: "lease_active", Run: "run-1", Company: "acme", Scope: prp.ScopeTask,
		CreatedAt: t(32 * time.Minute), ExpiresAt: t(37 * time.Minute), Resume: "s_1", Holder: true,
	}, {
		Hash: upgradeTicketHash(3), Lease: "lease_draft", Run: "probe-1", Company: "acme", Scope: prp.ScopeProbe,
		CreatedAt: t(33 * time.Minute), ExpiresAt: t(38 * time.Minute),
	}}
	r.sessions = []controller.Session{{
		ID: "s_1", Lease: "lease_active", Run: "run-1", Company: "acme", Scope: prp.ScopeTask, CreatedAt: t(31 * time.Minute),
		Ticket: upgradeTicketHash(1).String(), Holder: true, ConnectedUntil: t(40 * time.Minute),
	}, {
		ID: "s_2", Lease: "lease_released", Run: "run-2", Company: "acme", Scope: prp.ScopeTask, CreatedAt: t(14 * time.Minute),
	}}
	start := prpwire.SealCommand(prp.Command{ID: "c_1", Kind: prp.CommandTaskStart, Lease: "lease_active", Run: "run-1",
		TaskStart: &prp.TaskStart{TaskID: "t_1", Argv: []string{"sh", "-c", "make test"}, Env: map[string]string{"CI": "1"}, Cwd: "/w",
			Deadline: t(50 * time.Minute), OutputLimit: 1 << 20,
			Secrets: []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "secret:sec_key@v2", Env: "DEPLOY_KEY"}}}})
	stop := prpwire.SealCommand(prp.Command{ID: "c_2", Kind: prp.CommandTaskStop, Lease: "lease_active", Run: "run-1",
		TaskStop: &prp.TaskStop{TaskID: "t_1", Grace: 5 * time.Second}})
	pending := prpwire.SealCommand(prp.Command{ID: "c_3", Kind: prp.CommandTaskStart, Lease: "lease_active", Run: "run-1",
		TaskStart: &prp.TaskStart{TaskID: "t_2", Argv: []string{"true"}}})
	proof := &prp.StopProof{TaskID: "t_1", Methods: []string{"process-group"}, Survivors: []int{}, VerifiedAt: t(45 * time.Minute), Complete: true}
	r.commands = []upgradeCommand{
		{session: "s_1", command: start, secretsSent: true, result: &prp.Result{CommandID: "c_1", Status: prp.ResultDone}},
		{session: "s_1", command: stop, result: &prp.Result{CommandID: "c_2", Status: prp.ResultDone, Exit: &prp.Exit{Code: -1, Signal: "TERM"}, Proof: proof}},
		{session: "s_1", command: pending},
	}
	r.events = []controller.EventRecord{
		{Session: "s_1", Seq: 1, Event: prp.Event{Kind: prp.EventResult, Result: &prp.Result{CommandID: "c_1", Status: prp.ResultDone}}, StoredAt: t(41 * time.Minute)},
		{Session: "s_1", Seq: 2, Event: prp.Event{Kind: prp.EventStarted, TaskID: "t_1", PID: 4242}, StoredAt: t(42 * time.Minute)},
		{Session: "s_1", Seq: 3, Event: prp.Event{Kind: prp.EventOutput, TaskID: "t_1", Output: &prp.Output{Stream: prp.Stdout, Offset: 0}},
			Ref: &controller.OutputRef{File: "s_1/t_1.out", Offset: 0, Length: 12}, StoredAt: t(43 * time.Minute)},
		{Session: "s_1", Seq: 4, Event: prp.Event{Kind: prp.EventExit, TaskID: "t_1", Exit: &prp.Exit{Code: -1, Signal: "TERM"}}, StoredAt: t(44 * time.Minute)},
		{Session: "s_1", Seq: 5, Event: prp.Event{Kind: prp.EventProof, TaskID: "t_1", Proof: proof}, StoredAt: t(45 * time.Minute)},
	}
	r.usage = map[string][]controller.TaskUsage{
		"s_1": {{Task: "t_1", Usage: controller.OutputUsage{Seq: 3, Bytes: 12, Events: 1, Truncated: 0, Discarded: 0}}},
	}
	return r
}
