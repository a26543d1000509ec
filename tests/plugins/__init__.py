"""Plugin modules for the tests (named in ``CEMLAB_PLUGINS``): code outside the ``cemlab``
package that registers variants, tasks, figures or claims. Not test modules."""
