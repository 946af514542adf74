package plugin

// ManifestSuffix is manifestSuffix for the external tests.
const ManifestSuffix = manifestSuffix

// OutputConnsTaken returns how many output connections plugins handed
// this process's streams (outsock.go).
func OutputConnsTaken() int64 { return outputConnsTaken.Load() }
