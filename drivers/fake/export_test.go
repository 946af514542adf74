package fake

// WithHostname returns p reporting h as its host name, for the external
// tests.
func WithHostname(p Platform, h string) Platform {
	p.hostname = h
	return p
}

// Ptr returns a pointer to v.
func Ptr[T any](v T) *T { return &v }
