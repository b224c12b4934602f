package domain

// Platform is a push target's mobile platform.
type Platform string

// The platforms Swrve pushes to.
const (
	PlatformIOS     Platform = "IOS"
	PlatformAndroid Platform = "ANDROID"
)

// PushTarget is one device of a client that receives push notifications.
type PushTarget struct {
	Platform Platform
	PushKey  string
}
