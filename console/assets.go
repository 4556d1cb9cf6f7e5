package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed web
var web embed.FS

// pageHandler serves the web page and its assets (embedded: the page works
// offline, with no CDN).
func pageHandler() http.Handler {
	sub, err := fs.Sub(web, "web")
	if err != nil {
		panic(err) // the embedded tree has web/ by construction
	}
	return http.FileServerFS(sub)
}
