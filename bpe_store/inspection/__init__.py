"""Reading a store for people: status, SQL, ``show`` / ``why``, the HTML report, and progress."""
