package config

// The config limits, for this package's external tests.
const (
	MaxStringLen = maxStringLen
	MaxEntries   = maxEntries
)
