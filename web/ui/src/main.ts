import { graphPage } from './graph';
import { explorePage } from './explore';
import { statusPage } from './status';

const page = location.pathname.split('/').filter(Boolean).pop() ?? '';
const app = document.getElementById('app')!;
const which = page === 'explore' || page === 'status' ? page : 'graph';
document.querySelectorAll<HTMLAnchorElement>('nav a[data-page]').forEach((a) => a.classList.toggle('active', a.dataset.page === which));
document.title = { graph: 'Query', explore: 'Metrics explorer', status: 'Status' }[which] + ' - kairos-adapter';
if (which === 'explore') explorePage(app);
else if (which === 'status') statusPage(app);
else graphPage(app);
