package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
	"github.com/berthdev/berth/errcode"
)

// This file converts between package drivers' values and the protocol's
// messages, on both sides of the boundary.

// carried is what protocol version 1 carries: a plugin declares no other
// capability, whatever its driver implements (declared = implemented).
var carried = drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReattach, drivers.CapReuse, drivers.CapList, drivers.CapDestroyByID,
	drivers.CapImageIdentity, drivers.CapTemplateCapture, drivers.CapTemplateDelete, drivers.CapTerminal, drivers.CapFiles, drivers.CapRunnerIngress)

// sentinels are the errors a driver's error may wrap that the host's
// rebuilt error wraps too, by their name on the wire: the driver
// contract's and drivers/config's by reason, errcode's record sentinels
// and the context's errors by a name of their own.
var sentinels = []struct {
	name string
	err  error
}{
	{"unreachable", drivers.ErrUnreachable},
	{"tls_unverified", drivers.ErrTLSUnverified},
	{"auth_failed", drivers.ErrAuth},
	{"host_key_mismatch", drivers.ErrHostKeyMismatch},
	{"host_key_unknown", drivers.ErrHostKeyUnknown},
	{"image_not_found", drivers.ErrImageNotFound},
	{"image_inactive", drivers.ErrImageInactive},
	{"transient", drivers.ErrTransient},
	{"unsupported", drivers.ErrUnsupported},
	{"provider_unavailable", drivers.ErrUnavailable},
	{"timeout", drivers.ErrTimeout},
	{"released", drivers.ErrReleased},
	{"in_use", drivers.ErrInUse},
	{"missing_credentials", config.ErrCredentialsMissing},
	{"invalid_config", config.ErrInvalid},
	{"errcode_not_found", errcode.ErrNotFound},
	{"errcode_already_exists", errcode.ErrAlreadyExists},
	{"errcode_conflict", errcode.ErrConflict},
	{"errcode_denied", errcode.ErrDenied},
	{"errcode_invalid", errcode.ErrInvalid},
	{"context_canceled", context.Canceled},
	{"context_deadline", context.DeadlineExceeded},
}

// errorToWire returns err as the protocol carries it; nil for nil.
func errorToWire(err error) *pluginpb.Error {
	if err == nil {
		return nil
	}
	w := &pluginpb.Error{
		Code:    errcode.Code(err).String(),
		Reason:  errcode.ReasonOf(err),
		Message: errcode.MessageOf(err),
		Detail:  err.Error(),
		Field:   errcode.FieldOf(err),
		Target:  errcode.TargetOf(err),
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			w.Sentinels = append(w.Sentinels, s.name)
		}
	}
	walkConfigErrors(err, func(ce *config.Error) {
		w.ConfigProblems = append(w.ConfigProblems, &pluginpb.ConfigProblem{Field: ce.Field, Reason: ce.Reason})
	})
	return w
}

// walkConfigErrors calls f for every *config.Error in err's tree.
func walkConfigErrors(err error, f func(*config.Error)) {
	if ce, ok := err.(*config.Error); ok {
		f(ce)
		return
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			walkConfigErrors(e, f)
		}
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkConfigErrors(e, f)
		}
	}
}

// remoteError is the cause of an error rebuilt from the wire: its text is
// the plugin's chain, and it wraps the sentinels the plugin's error
// wrapped.
type remoteError struct {
	text string
	errs []error
}

func (e *remoteError) Error() string   { return e.text }
func (e *remoteError) Unwrap() []error { return e.errs }

// errorFromWire rebuilds the error w of the driver served by the plugin
// named plugin: its code, reason, message, field and target as the
// plugin's, wrapping what it wrapped of sentinels (and ErrTransient, so
// that its Transient method answers), and for a config error the
// config.Error of each problem. nil for nil.
func errorFromWire(plugin string, w *pluginpb.Error) error {
	if w == nil {
		return nil
	}
	var code errcode.ErrorCode
	if code.UnmarshalText([]byte(w.Code)) != nil {
		code = errcode.Unknown
	}
	cause := &remoteError{text: fmt.Sprintf("plugin %q: %s", plugin, w.Detail)}
	if len(w.ConfigProblems) > 0 {
		// A config error is the config.Errors themselves, as Normalize
		// joins them: their text and field are what the host shows.
		var errs []error
		for _, p := range w.ConfigProblems {
			errs = append(errs, &config.Error{Driver: plugin, Field: p.Field, Reason: p.Reason})
		}
		for _, name := range w.Sentinels {
			if name == "missing_credentials" {
				errs = append(errs, config.ErrCredentialsMissing)
			}
		}
		return errors.Join(errs...)
	}
	for _, name := range w.Sentinels {
		for _, s := range sentinels {
			if s.name == name {
				cause.errs = append(cause.errs, s.err)
			}
		}
	}
	return &errcode.Error{Code: code, Reason: w.Reason, Message: w.Message, Field: w.Field, Target: w.Target, Err: cause}
}

// valueToWire returns a config value as the protocol carries it.
func valueToWire(v any) *pluginpb.Value {
	switch t := v.(type) {
	case string:
		return &pluginpb.Value{Kind: &pluginpb.Value_Text{Text: t}}
	case int64:
		return &pluginpb.Value{Kind: &pluginpb.Value_Integer{Integer: t}}
	case int:
		return &pluginpb.Value{Kind: &pluginpb.Value_Integer{Integer: int64(t)}}
	case bool:
		return &pluginpb.Value{Kind: &pluginpb.Value_Boolean{Boolean: t}}
	case []string:
		return &pluginpb.Value{Kind: &pluginpb.Value_List{List: &pluginpb.StringList{Items: t}}}
	case map[string]string:
		return &pluginpb.Value{Kind: &pluginpb.Value_Map{Map: &pluginpb.StringMap{Entries: t}}}
	case config.SecretRef:
		return &pluginpb.Value{Kind: &pluginpb.Value_SecretRef{SecretRef: &pluginpb.SecretRef{Id: t.ID, Version: t.Version}}}
	case map[string]any:
		if sm, ok := secretMapToWire(t); ok {
			return &pluginpb.Value{Kind: &pluginpb.Value_SecretMap{SecretMap: sm}}
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("null")
	}
	return &pluginpb.Value{Kind: &pluginpb.Value_Json{Json: b}}
}

// secretMapToWire returns a secret map's value (each entry a string or a
// SecretRef), or false when m is something else.
func secretMapToWire(m map[string]any) (*pluginpb.SecretMap, bool) {
	out := &pluginpb.SecretMap{Entries: make(map[string]*pluginpb.SecretValue, len(m))}
	for k, v := range m {
		switch t := v.(type) {
		case string:
			out.Entries[k] = &pluginpb.SecretValue{Kind: &pluginpb.SecretValue_Text{Text: t}}
		case config.SecretRef:
			out.Entries[k] = &pluginpb.SecretValue{Kind: &pluginpb.SecretValue_Ref{Ref: &pluginpb.SecretRef{Id: t.ID, Version: t.Version}}}
		default:
			return nil, false
		}
	}
	return out, true
}

// valueFromWire returns the config value v carries.
func valueFromWire(v *pluginpb.Value) any {
	switch t := v.GetKind().(type) {
	case *pluginpb.Value_Text:
		return t.Text
	case *pluginpb.Value_Integer:
		return t.Integer
	case *pluginpb.Value_Boolean:
		return t.Boolean
	case *pluginpb.Value_List:
		return append([]string{}, t.List.GetItems()...)
	case *pluginpb.Value_Map:
		return maps.Clone(cmpMap(t.Map.GetEntries()))
	case *pluginpb.Value_SecretRef:
		return config.SecretRef{ID: t.SecretRef.GetId(), Version: t.SecretRef.GetVersion()}
	case *pluginpb.Value_SecretMap:
		out := make(map[string]any, len(t.SecretMap.GetEntries()))
		for k, e := range t.SecretMap.GetEntries() {
			if r := e.GetRef(); r != nil {
				out[k] = config.SecretRef{ID: r.GetId(), Version: r.GetVersion()}
			} else {
				out[k] = e.GetText()
			}
		}
		return out
	case *pluginpb.Value_Json:
		var a any
		if json.Unmarshal(t.Json, &a) == nil {
			return a
		}
	}
	return nil
}

// cmpMap returns m, or an empty map for nil (a StringMap value is never nil).
func cmpMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// configToWire returns cfg as the protocol carries it; nil stays nil.
func configToWire(cfg config.Config) *pluginpb.Config {
	if cfg == nil {
		return &pluginpb.Config{}
	}
	w := &pluginpb.Config{Present: true, Fields: make(map[string]*pluginpb.Value, len(cfg))}
	for k, v := range cfg {
		w.Fields[k] = valueToWire(v)
	}
	return w
}

// configFromWire returns the config w carries; nil when w says none.
func configFromWire(w *pluginpb.Config) config.Config {
	if !w.GetPresent() {
		return nil
	}
	cfg := make(config.Config, len(w.GetFields()))
	for k, v := range w.GetFields() {
		cfg[k] = valueFromWire(v)
	}
	return cfg
}

// setToWire returns the names of s's capabilities.
func setToWire(s drivers.Set) []string {
	var out []string
	for _, c := range s.List() {
		out = append(out, c.String())
	}
	return out
}

// setFromWire returns the set of the named capabilities; an unknown name
// (a newer plugin's) is an error.
func setFromWire(names []string) (drivers.Set, error) {
	var s drivers.Set
	for _, n := range names {
		var c drivers.Capability
		if err := c.UnmarshalText([]byte(n)); err != nil {
			return 0, err
		}
		s |= drivers.NewSet(c)
	}
	return s, nil
}

func receiptToWire(r drivers.Receipt) *pluginpb.Receipt {
	w := &pluginpb.Receipt{ProviderLeaseId: r.ProviderLeaseID, State: string(r.State), Confirmed: r.Confirmed,
		Evidence: r.Evidence, EvidenceKind: string(r.EvidenceKind)}
	if !r.ConfirmedAt.IsZero() {
		w.ConfirmedAtUnixNs = r.ConfirmedAt.UnixNano()
	}
	return w
}

func receiptFromWire(w *pluginpb.Receipt) drivers.Receipt {
	r := drivers.Receipt{ProviderLeaseID: w.GetProviderLeaseId(), State: drivers.State(w.GetState()), Confirmed: w.GetConfirmed(),
		Evidence: w.GetEvidence(), EvidenceKind: drivers.EvidenceKind(w.GetEvidenceKind())}
	if ns := w.GetConfirmedAtUnixNs(); ns != 0 {
		r.ConfirmedAt = time.Unix(0, ns)
	}
	return r
}

// kinds and types are drivers/config's Kind and Type by their names.
var (
	kinds = []config.Kind{config.KindIdentity, config.KindKnob, config.KindSecret, config.KindMetadata, config.KindSecretMap}
	types = []config.Type{config.TypeString, config.TypeInt, config.TypeBool, config.TypeDuration, config.TypeStringList, config.TypeStringMap}
)

func parseName[T fmt.Stringer](all []T, name, what string) (T, error) {
	i := slices.IndexFunc(all, func(v T) bool { return v.String() == name })
	if i < 0 {
		var zero T
		return zero, fmt.Errorf("unknown field %s %q", what, name)
	}
	return all[i], nil
}
