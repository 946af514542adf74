// Package prpkeys holds the signing keys of a prp.Signer for
// internal/prpwire, which mints and verifies the runners' connection tokens
// and derives their state keys with them. prp.Signer is defined on Keys
// (type Signer prpkeys.Keys), so that a host that builds one with
// prp.NewSigner can pass it to berth.New and never read the keys back,
// while berth's own wire code converts it to a *Keys and reads them here.
// There is no package state. It imports no berth package, so that prp can
// import it.
package prpkeys

// Keys are a Signer's keys: the current one signs, every one verifies (so
// keys can rotate). They never change after New.
type Keys struct {
	current string
	byID    map[string][]byte
}

// New returns the keys; it takes byID as it is (the caller hands over a
// copy it no longer changes).
func New(current string, byID map[string][]byte) *Keys {
	return &Keys{current: current, byID: byID}
}

// Current is the id of the key that signs; "" for nil or zero keys.
func (k *Keys) Current() string {
	if k == nil {
		return ""
	}
	return k.current
}

// Key returns the key named id, or nil when there is none.
func (k *Keys) Key(id string) []byte {
	if k == nil {
		return nil
	}
	return k.byID[id]
}
