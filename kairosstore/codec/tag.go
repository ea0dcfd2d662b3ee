package codec

// Tag is one KairosDB tag: a label other than __name__.
type Tag struct {
	Name, Value string
}
