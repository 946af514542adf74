package environment

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// reservedFields are the payload fields that belong to the server (CFG-5).
var reservedFields = []string{
	"id", "status", "revision", "createdAt", "updatedAt", "createdBy", "updatedBy",
	"qualification", "qualifications", "platformQualification", "platformQualificationRecorded",
	"qualified", "qualificationDiagnostic",
	"platform", "platformMeasurement", "platformMeasurements",
	"fingerprint", "configFingerprint", "imageIdentity", "template", "activeTemplate",
	"leases", "secrets",
	// The declared level is the driver's (View.Isolation), the measured
	// one a probe's (issue 56).
	"isolation", "measuredIsolation", "isolationEvidence",
}

// reservedFieldsCopy returns the payload fields that belong to the server
// (CFG-5): identity and bookkeeping of the record, and qualification and
// platform data that only probes write. A create or update payload naming
// one (in any letter case) at its top level or inside its config, unless
// the driver's schema declares a config field of that name, is rejected
// with an error wrapping errcode.ErrInvalid that names the field, and nothing is
// saved. The slice is a fresh copy.
func reservedFieldsCopy() []string { return slices.Clone(reservedFields) }

// reservedMetadataStems are folded keys (lower case, letters and digits
// only) that imitate server-owned state; any folded key containing
// "qualif" is reserved as well.
var reservedMetadataStems = []string{
	"platform", "platformmeasurement", "platformmeasurements",
	"fingerprint", "configfingerprint", "imageidentity",
	"isolation", "measuredisolation",
}

// isReservedMetadataKey reports whether a metadata key belongs to the
// server (CFG-5): it starts with reservedMetadataPrefix (in any letter
// case), or, folded to lower-case letters and digits, it mentions
// qualification ("qualified", "platformQualificationRecorded",
// "is_qualified", "Qualification-Status", ...) or names a platform
// measurement, fingerprint or image identity.
func isReservedMetadataKey(key string) bool {
	if strings.HasPrefix(strings.ToLower(key), reservedMetadataPrefix) {
		return true
	}
	f := fold(key)
	return strings.Contains(f, "qualif") || slices.Contains(reservedMetadataStems, f)
}

// fold lowers s and keeps only its letters and digits, so that
// "Platform_Qualification-Recorded" and "platformqualificationrecorded"
// compare equal.
func fold(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isReservedField(name string) bool {
	for _, r := range reservedFields {
		if strings.EqualFold(r, name) {
			return true
		}
	}
	return false
}

// checkMetadata rejects server-owned metadata keys (CFG-5, see
// isReservedMetadataKey), empty keys, and keys and values beyond the limits
// (maxMetadataEntries, maxMetadataKeyLen, maxMetadataValueLen) or that are
// not valid UTF-8 or hold a NUL byte.
func checkMetadata(md map[string]string) error {
	if len(md) > maxMetadataEntries {
		return &Error{Field: "metadata", Reason: fmt.Sprintf("more than %d entries", maxMetadataEntries), Err: errcode.ErrInvalid}
	}
	for _, k := range slices.Sorted(maps.Keys(md)) {
		field := "metadata." + fieldKey(k)
		if k == "" {
			return &Error{Field: "metadata", Reason: "empty key", Err: errcode.ErrInvalid}
		}
		if reason := checkText(k, maxMetadataKeyLen); reason != "" {
			return &Error{Field: field, Reason: "key " + reason, Err: errcode.ErrInvalid}
		}
		if strings.IndexFunc(k, unicode.IsControl) >= 0 {
			return &Error{Field: field, Reason: "key contains control characters", Err: errcode.ErrInvalid}
		}
		if reason := checkText(md[k], maxMetadataValueLen); reason != "" {
			return &Error{Field: field, Reason: "value " + reason, Err: errcode.ErrInvalid}
		}
		if isReservedMetadataKey(k) {
			return &Error{Field: field, Reason: "reserved server-owned metadata key (CFG-5)", Err: errcode.ErrInvalid}
		}
	}
	return nil
}

// checkReservedConfig rejects config members that name a server-owned field
// (CFG-5) and that the driver's schema does not declare, so that such a
// payload is refused as reserved, naming the field, rather than as an
// unknown field.
func checkReservedConfig(label string, schema *config.Schema, raw map[string]any) error {
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if _, declared := schema.Field(k); declared {
			continue
		}
		if isReservedField(k) || strings.Contains(fold(k), "qualif") {
			return &Error{Environment: label, Field: "config." + k, Err: errcode.ErrInvalid,
				Reason: "reserved server-owned field; it cannot be set by a request (CFG-5)"}
		}
	}
	return nil
}
