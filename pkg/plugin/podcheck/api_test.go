package podcheck

import (
	"strings"
	"testing"
)

func TestParseNamespaceSelector(t *testing.T) {
	for _, tc := range []struct {
		text, want string // want: the selector's string; "<nil>" every namespace
		wantErr    string
	}{
		{text: "", want: "<nil>"},
		{text: "{}", want: "<nil>"},
		{text: `{"matchLabels":{"a":"b"}}`, want: "a=b"},
		{text: `{"matchExpressions":[{"key":"x","operator":"NotIn","values":["y"]}]}`, want: "x notin (y)"},
		{text: `{"matchLabels":`, wantErr: "not a label selector in JSON"},
		{text: `{"matchExpressions":[{"key":"x","operator":"Near"}]}`, wantErr: `"Near" is not a valid label selector operator`},
	} {
		t.Run(tc.text, func(t *testing.T) {
			got, err := ParseNamespaceSelector(tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := "<nil>"
			if got != nil {
				s = got.String()
			}
			if s != tc.want {
				t.Errorf("selector %s, want %s", s, tc.want)
			}
		})
	}
}
