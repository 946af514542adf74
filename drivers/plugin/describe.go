package plugin

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/plugin/internal/pluginpb"
)

// description is what a plugin says of its driver, in its handshake
// (Describe) and in its manifest: the same fields, compared one by one.
type description struct {
	Name            string     `json:"name"`
	Version         string     `json:"version"`
	ProtocolVersion uint32     `json:"protocolVersion"`
	Kind            string     `json:"kind"`
	Capabilities    []string   `json:"capabilities"`
	StartupBudget   string     `json:"startupBudget"`
	Isolation       string     `json:"isolation"`
	Narrows         bool       `json:"narrows,omitempty"`
	Isolates        bool       `json:"isolates,omitempty"`
	Health          bool       `json:"health,omitempty"`
	Arch            bool       `json:"arch,omitempty"`
	Images          bool       `json:"images,omitempty"`
	Schema          schemaDesc `json:"schema"`
}

type schemaDesc struct {
	Driver            string      `json:"driver"`
	Fields            []fieldDesc `json:"fields"`
	ImageField        string      `json:"imageField,omitempty"`
	AccountField      string      `json:"accountField,omitempty"`
	HasCheck          bool        `json:"hasCheck,omitempty"`
	HasImageReference bool        `json:"hasImageReference,omitempty"`
}

type fieldDesc struct {
	Name     string   `json:"name"`
	Kind     string   `json:"kind"`
	Type     string   `json:"type"`
	Required bool     `json:"required,omitempty"`
	Default  any      `json:"default,omitempty"`
	Doc      string   `json:"doc,omitempty"`
	Enum     []string `json:"enum,omitempty"`
	HasCheck bool     `json:"hasCheck,omitempty"`
}

// describe returns the description of d served as a plugin of version
// version: its declared capabilities that the protocol carries and the
// driver implements.
func describe(d drivers.Driver, version string) *pluginpb.Description {
	c := d.Capabilities()
	s := d.Schema()
	ws := &pluginpb.Schema{Driver: s.Driver, ImageField: s.ImageField, AccountField: s.AccountField,
		HasCheck: s.Check != nil, HasImageReference: s.ImageReference != nil}
	for _, f := range s.Fields {
		wf := &pluginpb.Field{Name: f.Name, Kind: f.Kind.String(), Type: f.Type.String(), Required: f.Required, Doc: f.Doc,
			Enum: f.Enum, HasCheck: f.Check != nil}
		if f.Default != nil {
			wf.Default, wf.HasDefault = valueToWire(f.Default), true
		}
		ws.Fields = append(ws.Fields, wf)
	}
	_, narrows := d.(drivers.ConfigNarrower)
	_, isolates := d.(drivers.IsolationDeclarer)
	_, health := d.(drivers.HealthChecker)
	_, arch := d.(drivers.ArchReporter)
	_, imgs := d.(drivers.ImageLister)
	w := &pluginpb.Description{Name: d.Name(), Version: version, ProtocolVersion: protocolVersion, Kind: c.Kind.String(),
		Capabilities: setToWire(c.Declared & implemented(d)), StartupBudgetNs: int64(c.StartupBudget),
		Isolation: drivers.IsolationOf(d, nil).String(), Schema: ws, Narrows: narrows, Isolates: isolates, Health: health, Arch: arch,
		Images: imgs}
	if err := drivers.Available(d); err != nil {
		w.Availability = err.Error()
	}
	return w
}

// implemented returns what protocol version 1 carries of what d
// implements: at driver level by type assertion; at sandbox level
// (stream_exec, image_identity, template_capture, terminal, files,
// runner_ingress) as d
// declares it, which the conformance suite holds d to.
func implemented(d drivers.Driver) drivers.Set {
	s := drivers.NewSet(drivers.CapExec) | d.Capabilities().Declared&drivers.NewSet(drivers.CapStreamExec, drivers.CapImageIdentity, drivers.CapTemplateCapture, drivers.CapTerminal, drivers.CapFiles, drivers.CapRunnerIngress)
	if _, ok := d.(drivers.TemplateDeleter); ok {
		s |= drivers.NewSet(drivers.CapTemplateDelete)
	}
	if _, ok := d.(drivers.Lister); ok {
		s |= drivers.NewSet(drivers.CapList)
	}
	if _, ok := d.(drivers.Destroyer); ok {
		s |= drivers.NewSet(drivers.CapDestroyByID)
	}
	if _, ok := d.(drivers.Resumer); ok {
		s |= drivers.NewSet(drivers.CapReattach) | d.Capabilities().Declared&drivers.NewSet(drivers.CapReuse)
	}
	return s & carried
}

// descriptionFromWire returns the description w carries, its field
// defaults in their normalized types.
func descriptionFromWire(w *pluginpb.Description) (description, error) {
	d := description{Name: w.GetName(), Version: w.GetVersion(), ProtocolVersion: w.GetProtocolVersion(), Kind: w.GetKind(),
		Capabilities: w.GetCapabilities(), StartupBudget: time.Duration(w.GetStartupBudgetNs()).String(), Isolation: w.GetIsolation(),
		Narrows: w.GetNarrows(), Isolates: w.GetIsolates(), Health: w.GetHealth(), Arch: w.GetArch(),
		Images: w.GetImages()}
	s := w.GetSchema()
	d.Schema = schemaDesc{Driver: s.GetDriver(), ImageField: s.GetImageField(), AccountField: s.GetAccountField(),
		HasCheck: s.GetHasCheck(), HasImageReference: s.GetHasImageReference()}
	for _, f := range s.GetFields() {
		fd := fieldDesc{Name: f.GetName(), Kind: f.GetKind(), Type: f.GetType(), Required: f.GetRequired(), Doc: f.GetDoc(),
			Enum: f.GetEnum(), HasCheck: f.GetHasCheck()}
		if f.GetHasDefault() {
			fd.Default = valueFromWire(f.GetDefault())
		}
		d.Schema.Fields = append(d.Schema.Fields, fd)
	}
	// Defaults in their normalized form, as they are read from a manifest.
	if _, err := d.schema(); err != nil {
		return description{}, err
	}
	return d, nil
}

// capabilities returns the driver's declaration as d says it.
func (d description) capabilities() (drivers.Capabilities, error) {
	set, err := setFromWire(d.Capabilities)
	if err != nil {
		return drivers.Capabilities{}, err
	}
	if extra := set &^ carried; extra != 0 {
		return drivers.Capabilities{}, fmt.Errorf("it declares %s, which protocol version %d does not carry", extra, protocolVersion)
	}
	budget, err := time.ParseDuration(d.StartupBudget)
	if err != nil {
		return drivers.Capabilities{}, fmt.Errorf("startup budget %q: %w", d.StartupBudget, err)
	}
	c := drivers.Capabilities{Declared: set, StartupBudget: budget}
	switch d.Kind {
	case "sandbox":
		c.Kind = drivers.KindSandbox
	case "host":
		c.Kind = drivers.KindHost
	default:
		return drivers.Capabilities{}, fmt.Errorf("kind %q: want sandbox or host", d.Kind)
	}
	return c, nil
}

// schema returns the schema's data as a config.Schema without the
// driver's code (no checks); it normalizes each default in place.
func (d *description) schema() (*config.Schema, error) {
	s := &config.Schema{Driver: d.Schema.Driver, ImageField: d.Schema.ImageField, AccountField: d.Schema.AccountField}
	for i, fd := range d.Schema.Fields {
		kind, err := parseName(kinds, fd.Kind, "kind")
		if err != nil {
			return nil, fmt.Errorf("schema: field %q: %w", fd.Name, err)
		}
		typ, err := parseName(types, fd.Type, "type")
		if err != nil {
			return nil, fmt.Errorf("schema: field %q: %w", fd.Name, err)
		}
		f := config.Field{Name: fd.Name, Kind: kind, Type: typ, Required: fd.Required, Doc: fd.Doc, Enum: fd.Enum}
		if fd.Default != nil {
			one := &config.Schema{Driver: s.Driver, Fields: []config.Field{{Name: f.Name, Kind: kind, Type: typ}}}
			v, err := one.Normalize(map[string]any{f.Name: fd.Default})
			if err != nil {
				return nil, fmt.Errorf("schema: the default of field %q: %w", fd.Name, err)
			}
			f.Default, d.Schema.Fields[i].Default = v[f.Name], v[f.Name]
		}
		s.Fields = append(s.Fields, f)
	}
	return s, nil
}

// difference names the first field in which the handshake's description
// got differs from the manifest's want, "" when they agree.
func difference(got, want description) string {
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) == string(w) {
		return ""
	}
	var gm, wm map[string]json.RawMessage
	_ = json.Unmarshal(g, &gm)
	_ = json.Unmarshal(w, &wm)
	for _, k := range []string{"name", "version", "protocolVersion", "kind", "capabilities", "startupBudget", "isolation", "narrows", "isolates", "health", "arch", "images"} {
		if string(gm[k]) != string(wm[k]) {
			return fmt.Sprintf("%s: the plugin says %s, its manifest %s", k, orNone(gm[k]), orNone(wm[k]))
		}
	}
	return fmt.Sprintf("schema: the plugin says %s, its manifest %s", gm["schema"], wm["schema"])
}

func orNone(b json.RawMessage) string {
	if len(b) == 0 {
		return "none"
	}
	return string(b)
}
