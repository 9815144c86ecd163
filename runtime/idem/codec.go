package idem

import "encoding/json"

// Codec encodes results for storage and decodes them on replay. It must
// round-trip every result type of the wrapped methods; the generator rejects
// types JSON cannot carry (channels, functions, types with no exported state).
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSONCodec is the default Codec (encoding/json).
type JSONCodec struct{}

// Marshal encodes v as JSON.
func (JSONCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes JSON data into v.
func (JSONCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
