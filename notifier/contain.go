package notifier

import (
	"github.com/lockstream/lockstream/internal/contain"
)

// ErrorTypePanic is the error type of an attempt whose sender (or template)
// panicked: OTHER, the Swrve seed's rule. Such an attempt is Failed: the
// same input would panic again.
const ErrorTypePanic = "OTHER"

// Contain calls send and turns a panic in it into a Failed result with error
// type OTHER whose Err is the *contain.Panic (where "notifier"), value and
// stack; see PanicResult.
func Contain(send func() Result) (res Result) {
	defer func() {
		if p := contain.Recovered("notifier", recover()); p != nil {
			res = PanicResult(p)
		}
	}()
	return send()
}

// PanicResult is the result of an attempt that panicked: Failed, OTHER, the
// panic as Err.
func PanicResult(p *contain.Panic) Result {
	return Result{Outcome: Failed, ErrorType: ErrorTypePanic, Err: p}
}
