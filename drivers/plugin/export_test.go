package plugin

// ManifestSuffix is manifestSuffix for the external tests.
const ManifestSuffix = manifestSuffix
