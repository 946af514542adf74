package fake

// The platforms of the external tests: Alpine reporting the host name
// "box", the zero platform, and the zero platform reporting "h".
func init() {
	alpine := platforms[platformAlpine]
	alpine.hostname = "box"
	platforms["alpine-box"], platforms["zero"], platforms["zero-h"] = alpine, platform{}, platform{hostname: "h"}
}
