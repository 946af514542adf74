package main

import (
	_ "embed"
	"net/http"
)

// openapiDoc is the OpenAPI 3 document of the API: the route walk and
// every API test's request and response validation (openapi_test.go)
// keep it true to the server.
//
//go:embed openapi.json
var openapiDoc []byte

func (s *server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openapiDoc)
}
