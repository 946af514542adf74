package daytona

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/images"
)

// Config field names of the daytona driver.
const (
	// fieldAPIURL is the API base URL (Identity, required), for example
	// https://app.daytona.io/api.
	fieldAPIURL = "api_url"
	// fieldAPIKey is the API key sent as a bearer token (Secret, required).
	fieldAPIKey = "api_key"
	// fieldOrganizationID is sent as X-Daytona-Organization-ID (Identity,
	// optional). Daytona reads that header only for JWT (user session)
	// credentials; with an API key, what this driver sends, the key's own
	// organization is used and the header does nothing. The driver never
	// relies on it for scoping: when a sandbox the API returns belongs to
	// another organization than this field names, the driver logs a
	// warning; it goes by sandbox ids and labels, never by organization.
	fieldOrganizationID = "organization_id"
	// fieldSnapshotID is the id (a UUID) of the snapshot sandboxes are
	// created from (Identity, required; the schema's ImageField). A snapshot
	// name is refused: names do not qualify (QUAL-5, QUAL-6).
	fieldSnapshotID = "snapshot_id"
	// fieldTarget is the region sandboxes are created in (Identity,
	// optional; absent: the organization's default region).
	fieldTarget = "target"
	// fieldEnv holds environment variables of every command (a
	// config.KindSecretMap: each value is kept in the host's secret store).
	// They travel in each request's envs (process/execute and PTY
	// sessions), never in the sandbox's create-time env, which the API
	// shows. Daemons before v0.167.0 ignore envs: there a non-empty env is
	// refused with drivers.ErrUnsupported naming the daemon version, never
	// inlined into the command or dropped.
	fieldEnv = "env"
	// fieldLabels holds extra labels of every sandbox (Metadata); the
	// acquire request's labels win on a clash.
	fieldLabels = "labels"
	// fieldAutoStopInterval is the API's autoStopInterval in minutes (Knob;
	// 0 disables auto-stop; absent: the provider default).
	fieldAutoStopInterval = "auto_stop_interval"
	// fieldAutoArchiveInterval is the API's autoArchiveInterval in minutes
	// (Knob; 0 means the provider maximum; absent: the provider default).
	fieldAutoArchiveInterval = "auto_archive_interval"
	// fieldAutoDeleteInterval is the API's autoDeleteInterval in minutes
	// (Knob; negative disables auto-delete, 0 deletes the sandbox as soon as
	// it stops, which makes Release(Stop) a destroy; absent: the provider
	// default).
	fieldAutoDeleteInterval = "auto_delete_interval"
	// fieldExecTimeout is the toolbox's own time limit for one Exec, sent as
	// the execute request's timeout in whole seconds (Knob, duration; absent
	// or 0: none beyond the caller's context). When the toolbox gives up,
	// Exec fails with drivers.ErrTimeout.
	fieldExecTimeout = "exec_timeout"
	// fieldReactivateSnapshot says whether the driver reactivates the
	// configured snapshot when Daytona marked it inactive (Knob, bool,
	// default true). Daytona marks a snapshot that is not general inactive
	// after 14 idle days, and then refuses to create sandboxes from it. The
	// driver reactivates it by its id (POST /snapshots/{id}/activate, never
	// by name: QUAL-6) and waits until it is active again. When false, an
	// inactive snapshot fails with drivers.ErrImageInactive (code
	// image_inactive, PRB-5).
	fieldReactivateSnapshot = "reactivate_snapshot"
)

func newSchema() *config.Schema {
	minutes := func(min int64) func(v any) error {
		return func(v any) error {
			if n, _ := v.(int64); n < min || n > 1<<31-1 {
				return fmt.Errorf("must be between %d and %d minutes", min, 1<<31-1)
			}
			return nil
		}
	}
	return &config.Schema{
		Driver:     driverName,
		ImageField: fieldSnapshotID,
		// The API key's reference names the Daytona account (AUTH-2).
		AccountField: fieldAPIKey,
		// The snapshot id is the provider's own id: pinned (QUAL-6).
		ImageReference: func(cfg config.Config) (images.Reference, error) {
			id, err := images.SnapshotIdentity(driverName, cfg.String(fieldSnapshotID))
			if err != nil {
				return images.Reference{}, err
			}
			return id.Reference(), nil
		},
		Fields: []config.Field{
			{Name: fieldAPIURL, Kind: config.KindIdentity, Type: config.TypeString, Required: true,
				Doc: "Daytona API base URL, for example https://app.daytona.io/api", Check: checkAPIURL},
			{Name: fieldAPIKey, Kind: config.KindSecret, Type: config.TypeString, Required: true,
				Doc: "Daytona API key"},
			{Name: fieldOrganizationID, Advanced: true, Kind: config.KindIdentity, Type: config.TypeString,
				Doc: "organization id sent as X-Daytona-Organization-ID; effective only with JWTs, ignored for API keys"},
			{Name: fieldSnapshotID, Kind: config.KindIdentity, Type: config.TypeString, Required: true,
				Doc: "id (UUID) of the snapshot sandboxes are created from; never a name", Check: checkSnapshotID},
			{Name: fieldTarget, Advanced: true, Kind: config.KindIdentity, Type: config.TypeString,
				Doc: "region; absent: the organization's default"},
			{Name: fieldEnv, Advanced: true, Kind: config.KindSecretMap, Type: config.TypeStringMap, Check: checkEnvField,
				Doc: "environment variables of every command, for tokens and other secrets as well: each value is kept in the secret store " +
					"and sent with each command (needs sandbox daemon v0.167.0 or later), never in the sandbox's own env; a command's own env wins on a clash"},
			{Name: fieldLabels, Advanced: true, Kind: config.KindMetadata, Type: config.TypeStringMap,
				Doc: "extra labels of every sandbox"},
			{Name: fieldAutoStopInterval, Advanced: true, Kind: config.KindKnob, Type: config.TypeInt, Check: minutes(0),
				Doc: "minutes of inactivity before auto-stop; 0 disables"},
			{Name: fieldAutoArchiveInterval, Advanced: true, Kind: config.KindKnob, Type: config.TypeInt, Check: minutes(0),
				Doc: "minutes stopped before auto-archive; 0 means the provider maximum"},
			{Name: fieldAutoDeleteInterval, Advanced: true, Kind: config.KindKnob, Type: config.TypeInt, Check: minutes(-1),
				Doc: "minutes stopped before auto-delete; -1 disables, 0 deletes on stop"},
			{Name: fieldExecTimeout, Advanced: true, Kind: config.KindKnob, Type: config.TypeDuration,
				Doc: "the toolbox's own time limit for one command (whole seconds)"},
			{Name: fieldReactivateSnapshot, Advanced: true, Kind: config.KindKnob, Type: config.TypeBool, Default: true,
				Doc: "reactivate the snapshot (by id) when Daytona marked it inactive after 14 idle days"},
		},
	}
}

// checkAPIURL accepts an https URL, or an http URL whose host is loopback
// (a local fake or tunnel): the API key is a bearer token and must not
// cross a network in clear.
func checkAPIURL(v any) error {
	s, _ := v.(string)
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an http(s) URL such as https://app.daytona.io/api")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("must not carry user info, a query or a fragment")
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return fmt.Errorf("must use https: http is accepted only for a loopback host, not %q", u.Hostname())
	}
	return nil
}

// isLoopback reports whether host is localhost or a loopback IP address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkEnvField accepts variable names the daemon accepts in envs
// (shell identifiers).
func checkEnvField(v any) error {
	m, _ := v.(map[string]any) // a SecretMap field's normalized form
	for k := range m {
		if !envNameRE.MatchString(k) {
			return fmt.Errorf("variable name %q is not a shell identifier", fieldKey(k))
		}
	}
	return nil
}

// fieldKey shortens a long map key for an error message.
func fieldKey(k string) string {
	if len(k) > 64 {
		return strings.ToValidUTF8(k[:64], "?") + "..."
	}
	return k
}

func checkSnapshotID(v any) error {
	s, _ := v.(string)
	if err := uuid.Validate(s); err != nil || len(s) != 36 {
		return fmt.Errorf("%q is not a snapshot id (a UUID); snapshots known only by name do not qualify", s)
	}
	return nil
}
