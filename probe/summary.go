package probe

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/errmsg"
)

// notValidatedNote is what every host probe summary says plainly (PRB-1).
const notValidatedNote = "This probe did NOT validate an adapter, a workspace or task execution."

// targetOf names the target of a config without secrets: "user@host:port"
// when the config has a host field, else the driver's kind and name, with
// the region when the config has one.
func targetOf(d drivers.Driver, cfg config.Config) string {
	if host := cfg.String("host"); host != "" {
		t := host
		if port := cfg.Int("port"); port > 0 {
			t += ":" + strconv.FormatInt(port, 10)
		}
		if user := cfg.String("user"); user != "" {
			t = user + "@" + t
		}
		return t
	}
	if d.Capabilities().Kind == drivers.KindHost {
		return "host " + d.Name()
	}
	t := "provider " + d.Name()
	if region := cfg.String("region"); region != "" {
		t += " (region " + region + ")"
	}
	return t
}

// label names the probed thing: `environment env_1 ("name", driver fake,
// provider fake (region local-1))`, or `draft config (driver ssh, ...)`.
func (r *run) label() string {
	res := r.res
	if r.draft {
		return fmt.Sprintf("draft config (driver %s, %s)", res.Driver, res.Target)
	}
	return fmt.Sprintf("environment %s (%q, driver %s, %s)", res.Environment, res.EnvironmentName, res.Driver, res.Target)
}

// summarize writes the Result's summary (what was reached and measured,
// or where it failed; the cleanup), its message and, for host targets,
// what the probe did not validate.
func summarize(r *run, d drivers.Driver) string {
	res := r.res
	host := d != nil && d.Capabilities().Kind == drivers.KindHost
	if host {
		res.NotValidated = notValidatedNote
	}
	res.Message = message(r)
	var b strings.Builder
	if res.OK {
		switch {
		case res.RunnerVersion != "":
			fmt.Fprintf(&b, "Started berth's runner %s under a probe identity (no task can run) in %s", res.RunnerVersion, r.label())
			if res.LeaseID != "" {
				fmt.Fprintf(&b, " on fresh lease %s", res.LeaseID)
			}
			if !res.ImageIdentity.IsZero() {
				fmt.Fprintf(&b, "; live image %s", res.ImageIdentity)
			}
		case host && res.Driver == "local":
			fmt.Fprintf(&b, "Local probe of %s: host %q is reachable and working directory %s is usable", r.label(), res.Hostname, res.Cwd)
		case host:
			fmt.Fprintf(&b, "Connected to %s with a trusted host key; remote working directory %s exists", r.label(), res.Cwd)
		default:
			what := "a fresh lease"
			if res.LeaseID != "" {
				what = "fresh lease " + res.LeaseID
			}
			fmt.Fprintf(&b, "Probed %s on %s", r.label(), what)
			if !res.ImageIdentity.IsZero() {
				fmt.Fprintf(&b, "; live image %s", res.ImageIdentity)
			}
		}
		if !res.Platform.IsZero() {
			fmt.Fprintf(&b, "; platform %s", res.Platform)
		}
		if res.Cleanup != nil && res.Cleanup.Confirmed {
			b.WriteString("; cleanup confirmed")
		}
		b.WriteString(".")
	} else {
		st, _ := r.failedStage()
		fmt.Fprintf(&b, "Probe of %s failed at stage %s (%s): %s.", r.label(), st.Name, st.Code, st.Error)
		if c := res.Cleanup; c != nil && c.PendingCleanup {
			if res.LeaseID != "" {
				fmt.Fprintf(&b, " Lease %s is pending cleanup; a sweep retries it.", res.LeaseID)
			} else {
				b.WriteString(" The sandbox's cleanup is not confirmed; it may still exist at the provider.")
			}
		}
	}
	return b.String()
}

// message is the Result's sentence for a person: what was reached, or the
// failed stage's message.
func message(r *run) string {
	res := r.res
	if !res.OK {
		if st, ok := r.failedStage(); ok && st.Message != "" {
			return st.Message
		}
		return errmsg.Sentence(fmt.Sprintf("The probe of %s failed", res.Target))
	}
	what := res.Target
	if res.EnvironmentName != "" {
		what = fmt.Sprintf("%s of environment %q", res.Target, res.EnvironmentName)
	}
	m := "Reached " + what
	if res.Cwd != "" {
		m += ": working directory " + res.Cwd
	}
	if !res.Platform.IsZero() {
		m += ", platform " + res.Platform.String()
	}
	return errmsg.Sentence(m)
}
