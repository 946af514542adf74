package environment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/secretcfg"
)

// This file moves pasted secrets into the SecretStore (CFG-3) and decides
// which stored secrets an update or a delete leaves behind. Secret fields
// hold one secret each; every value of a SecretMap field (a driver's secret
// env vars) is a secret of its own, named after field and key
// ("env.GITHUB_TOKEN") so that operators can tell them apart.

// secretName is the name a secret is stored under: the field, and for a
// SecretMap value the field and its key. It never holds a value.
func secretName(field, key string) string {
	if key == "" {
		return field
	}
	return field + "." + key
}

// configPath names a secret's place in a request for errors:
// "config.FIELD" or "config.FIELD.KEY" (long keys shortened).
func configPath(field, key string) string {
	if key == "" {
		return "config." + field
	}
	return "config." + field + "." + fieldKey(key)
}

// storedSecretField returns the config path of the first secret of cfg
// that points at a stored secret (a Secret field or SecretMap value holding
// a SecretRef), or "" when every secret is pasted.
func storedSecretField(schema *config.Schema, cfg config.Config) string {
	for _, f := range schema.Fields {
		switch f.Kind {
		case config.KindSecret:
			if _, isRef := cfg.SecretRef(f.Name); isRef {
				return configPath(f.Name, "")
			}
		case config.KindSecretMap:
			if refs := cfg.SecretMapRefs(f.Name); len(refs) > 0 {
				return configPath(f.Name, slices.Sorted(maps.Keys(refs))[0])
			}
		}
	}
	return ""
}

// moveSecrets moves every pasted secret of cfg into the secret store
// (CFG-3), replacing it by its reference in cfg: the value of a Secret
// field, and each value of a SecretMap field. prev, if not nil, is the
// stored config: a pasted value for a field (or map key) that already has a
// secret becomes that secret's next version. It returns the references it
// created, for rollback. On error it has rolled back itself; the error
// names the field and key, never a value.
func (c *Catalog) moveSecrets(ctx context.Context, label, owner string, schema *config.Schema, cfg, prev config.Config) ([]config.SecretRef, error) {
	var created []config.SecretRef
	store := func(field, key string, old config.SecretRef, hadOld bool, value string) (config.SecretRef, error) {
		var ref config.SecretRef
		var err error
		if hadOld {
			ref, err = c.secrets.Replace(ctx, old, value)
		}
		if !hadOld || errors.Is(err, errcode.ErrNotFound) {
			// No secret yet, or the stored one is gone: start a new one.
			ref, err = c.secrets.Put(ctx, owner, secretName(field, key), value)
		}
		if err != nil {
			c.dropSecrets(ctx, created)
			return config.SecretRef{}, fmt.Errorf("environment %s: field %q: storing the secret: %w", label, configPath(field, key), err)
		}
		created = append(created, ref)
		return ref, nil
	}
	for _, f := range schema.Fields {
		switch f.Kind {
		case config.KindSecret:
			value, plain := cfg[f.Name].(string)
			if !plain {
				continue
			}
			old, hadOld := prev.SecretRef(f.Name)
			ref, err := store(f.Name, "", old, hadOld, value)
			if err != nil {
				return nil, err
			}
			cfg[f.Name] = ref
		case config.KindSecretMap:
			keys := secretcfg.PlainSecretKeys(cfg, f.Name)
			if len(keys) == 0 {
				continue
			}
			m, _ := cfg[f.Name].(map[string]any) // normalized: values are strings or refs
			m = maps.Clone(m)
			olds := prev.SecretMapRefs(f.Name)
			for _, k := range keys {
				old, hadOld := olds[k]
				ref, err := store(f.Name, k, old, hadOld, m[k].(string))
				if err != nil {
					return nil, err
				}
				m[k] = ref
			}
			cfg[f.Name] = m
		}
	}
	return created, nil
}

// supersededSecrets compares the secrets of an update's normalized config
// cfg with the stored config prev. A reference in cfg must be the one
// stored for that field (and map key) of this environment, else the update
// is refused (no environment may point at another's secret, CFG-3). It
// returns what the update leaves behind once saved: the current version of
// a secret that gets a pasted value (its next version replaces it), and the
// whole secret (Version 0) of a field or map key that is gone.
func supersededSecrets(label string, schema *config.Schema, cfg, prev config.Config) ([]config.SecretRef, error) {
	var out []config.SecretRef
	foreign := func(field, key string, ref config.SecretRef) error {
		return &Error{Environment: label, Field: configPath(field, key), Err: errcode.ErrInvalid,
			Reason: fmt.Sprintf("secret reference %s is not the one stored for this field of this environment; keep the stored reference or paste a new value (CFG-3)", ref)}
	}
	for _, f := range schema.Fields {
		switch f.Kind {
		case config.KindSecret:
			old, hadOld := prev.SecretRef(f.Name)
			v, present := cfg[f.Name]
			switch ref, isRef := v.(config.SecretRef); {
			case !present:
				if hadOld {
					out = append(out, config.SecretRef{ID: old.ID}) // the whole secret
				}
			case isRef && (!hadOld || ref != old):
				return nil, foreign(f.Name, "", ref)
			case !isRef && hadOld:
				out = append(out, old) // this version, once the new one is saved
			}
		case config.KindSecretMap:
			olds := prev.SecretMapRefs(f.Name)
			m, _ := cfg[f.Name].(map[string]any)
			for _, k := range slices.Sorted(maps.Keys(m)) {
				old, hadOld := olds[k]
				switch ref, isRef := m[k].(config.SecretRef); {
				case isRef && (!hadOld || ref != old):
					return nil, foreign(f.Name, k, ref)
				case !isRef && hadOld:
					out = append(out, old)
				}
			}
			for _, k := range slices.Sorted(maps.Keys(olds)) {
				if _, kept := m[k]; !kept {
					out = append(out, config.SecretRef{ID: olds[k].ID})
				}
			}
		}
	}
	return out, nil
}

// retireSecrets retires secrets (or versions) that a saved config no
// longer references: the versions an update superseded and the secrets of a
// deleted environment. It is the one place where secrets that leases may
// still reference are given up (rollbacks of never-saved secrets use
// dropSecrets). With a secret keeper (wired by berth.New) a secret that a
// lease not proven clean uses is kept, marked retired, until the last such
// lease is proven clean (CFG-7, LEASE-9); without one it is deleted now.
func (c *Catalog) retireSecrets(ctx context.Context, refs []config.SecretRef) {
	if c.keeper == nil {
		c.dropSecrets(ctx, refs)
		return
	}
	if err := c.keeper.Retire(context.WithoutCancel(ctx), refs); err != nil {
		c.log.LogAttrs(ctx, slog.LevelWarn, "environment: retiring secrets failed; they are kept", slog.String("error", err.Error()))
	}
}

// dropSecrets deletes refs (best effort: a failure is logged without value).
func (c *Catalog) dropSecrets(ctx context.Context, refs []config.SecretRef) {
	ctx = context.WithoutCancel(ctx)
	for _, r := range refs {
		if err := c.secrets.Delete(ctx, r); err != nil {
			c.log.LogAttrs(ctx, slog.LevelWarn, "environment: deleting secret failed",
				slog.String("secret", r.String()), slog.String("error", err.Error()))
		}
	}
}
