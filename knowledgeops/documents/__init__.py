"""Documents as a whole: removing one (the steps the API and DOCUMENT_DELETE share) and what
running imports still need (`live_imports`)."""
