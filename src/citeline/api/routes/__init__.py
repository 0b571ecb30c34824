"""The API's routes, one module per resource. Each is a shell: parse, call the library, shape JSON."""
