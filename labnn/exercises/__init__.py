"""Exercise checkers for the notebooks: each compares a learner's function with the
package's reference on random inputs and explains exactly what differs."""
