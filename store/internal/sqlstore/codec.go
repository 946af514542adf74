package sqlstore

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"time"
)

// Column conventions shared by every component (see doc.go):
//
//   - times are BIGINT columns holding UTC Unix nanoseconds, NULL for the
//     zero time: exact on both databases (PostgreSQL's timestamptz keeps only
//     microseconds), comparable with < and >, independent of the server's
//     clock and time zone;
//   - JSON values (maps, configs) are TEXT columns written by encoding/json,
//     NULL for a nil map or slice, and decoded with UseNumber so that
//     integers come back exact (as json.Number).

// nanos returns t as a BIGINT column value: UTC Unix nanoseconds, or NULL for
// the zero time. Times outside the years 1678..2262 do not fit.
func nanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

// fromNanos is the inverse of nanos; it returns UTC times.
func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

// jsonText encodes v as a TEXT column value; a nil map, slice or pointer is
// NULL.
func jsonText(v any) (sql.NullString, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return sql.NullString{}, err
	}
	if string(b) == "null" {
		return sql.NullString{}, nil
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

// fromJSONText decodes a TEXT column written by jsonText into dst, leaving
// dst untouched for NULL. Numbers decode as json.Number.
func fromJSONText(s sql.NullString, dst any) error {
	if !s.Valid {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s.String)))
	dec.UseNumber()
	return dec.Decode(dst)
}
