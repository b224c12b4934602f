package swrve

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lockstream/lockstream/domain"
)

// PushKeys maps a message prototype to the Swrve push key (the transactional
// campaign key) of each platform.
type PushKeys map[string]map[domain.Platform]string

// Lookup returns the push key of prototype on platform, and whether there is one.
func (k PushKeys) Lookup(prototype string, platform domain.Platform) (string, bool) {
	key, ok := k[prototype][platform]
	return key, ok && key != ""
}

// pushKeysFile is the part of the YAML file LoadPushKeys reads; other top-level
// sections are ignored so the mapping can live in a larger config file.
type pushKeysFile struct {
	Swrve *struct {
		MessagePrototypePushKeys map[string]map[string]string `yaml:"messagePrototypePushKeys"`
	} `yaml:"swrve"`
}

// LoadPushKeys reads the mapping from a YAML file of the form
//
//	swrve:
//	  messagePrototypePushKeys:
//	    'Hello':
//	      IOS: d36ae023-010c-4f3a-9bd7-9924a754b4b4
//	      ANDROID: f31690cb-a763-4259-af18-6aed41afd9ed
//
// The platforms are IOS and ANDROID, in upper case. A missing section, an
// unknown platform, an empty prototype name or an empty key is an error that
// names the file and the entry.
func LoadPushKeys(path string) (PushKeys, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading Swrve push keys: %w", err)
	}
	keys, err := parsePushKeys(raw)
	if err != nil {
		return nil, fmt.Errorf("swrve push keys file %s: %w", path, err)
	}
	return keys, nil
}

func parsePushKeys(raw []byte) (PushKeys, error) {
	var f pushKeysFile
	if err := yaml.NewDecoder(bytes.NewReader(raw)).Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file, want swrve.messagePrototypePushKeys")
		}
		return nil, fmt.Errorf("parsing YAML: %w", err)
	}
	if f.Swrve == nil || f.Swrve.MessagePrototypePushKeys == nil {
		return nil, errors.New("no swrve.messagePrototypePushKeys section")
	}
	keys := make(PushKeys, len(f.Swrve.MessagePrototypePushKeys))
	// Sorted, so the same bad file always reports the same entry first.
	prototypes := make([]string, 0, len(f.Swrve.MessagePrototypePushKeys))
	for p := range f.Swrve.MessagePrototypePushKeys {
		prototypes = append(prototypes, p)
	}
	slices.Sort(prototypes)
	var errs []error
	for _, prototype := range prototypes {
		platforms := f.Swrve.MessagePrototypePushKeys[prototype]
		if strings.TrimSpace(prototype) == "" {
			errs = append(errs, errors.New("swrve.messagePrototypePushKeys: empty message prototype name"))
			continue
		}
		if len(platforms) == 0 {
			errs = append(errs, fmt.Errorf("swrve.messagePrototypePushKeys[%q]: no platforms", prototype))
			continue
		}
		byPlatform := make(map[domain.Platform]string, len(platforms))
		for platform, key := range platforms {
			switch p := domain.Platform(platform); p {
			case domain.PlatformIOS, domain.PlatformAndroid:
				if strings.TrimSpace(key) == "" {
					errs = append(errs, fmt.Errorf("swrve.messagePrototypePushKeys[%q][%s]: empty push key", prototype, platform))
					continue
				}
				byPlatform[p] = strings.TrimSpace(key)
			default:
				errs = append(errs, fmt.Errorf("swrve.messagePrototypePushKeys[%q]: unknown platform %q (want %s or %s)",
					prototype, platform, domain.PlatformIOS, domain.PlatformAndroid))
			}
		}
		keys[prototype] = byPlatform
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return keys, nil
}
