// Package importrules holds the test that keeps the import rules of
// docs/architecture.md ("Packages and what they may import") true: every
// package of the module has a row there, and its imports and dependencies
// are those its row allows. The table is the one statement of the rules;
// this package only reads and checks it.
package importrules
