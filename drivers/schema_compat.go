package drivers

// Old names of the field kinds and types, kept only until the packages
// being changed on other branches (drivers/daytona, lease) are renamed
// too; then this file is deleted. They are the same constants.
const (
	// Identity is KindIdentity.
	//
	// Deprecated: use KindIdentity (it collides with images.Identity).
	Identity = KindIdentity
	// Knob is KindKnob.
	//
	// Deprecated: use KindKnob.
	Knob = KindKnob
	// Secret is KindSecret.
	//
	// Deprecated: use KindSecret.
	Secret = KindSecret
	// Metadata is KindMetadata.
	//
	// Deprecated: use KindMetadata.
	Metadata = KindMetadata
	// String is TypeString.
	//
	// Deprecated: use TypeString.
	String = TypeString
	// Int is TypeInt.
	//
	// Deprecated: use TypeInt.
	Int = TypeInt
	// Bool is TypeBool.
	//
	// Deprecated: use TypeBool.
	Bool = TypeBool
	// Duration is TypeDuration.
	//
	// Deprecated: use TypeDuration.
	Duration = TypeDuration
	// StringList is TypeStringList.
	//
	// Deprecated: use TypeStringList.
	StringList = TypeStringList
	// StringMap is TypeStringMap.
	//
	// Deprecated: use TypeStringMap.
	StringMap = TypeStringMap
)
